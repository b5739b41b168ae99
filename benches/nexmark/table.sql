-- The Nexmark tables, fed by Eddy's in-process generator (the `nexmark`
-- connector). The bench runner replaces {events} and {threads}; every
-- event time is declared at most 4 seconds late, so windows close and
-- their state is dropped as the stream moves on. The tables are declared
-- append-only (Nexmark's streams only insert), so that operators over them
-- may keep less state (a top-k keeps each partition's first rows only).
CREATE TABLE person (
    id BIGINT,
    name VARCHAR,
    emailAddress VARCHAR,
    creditCard VARCHAR,
    city VARCHAR,
    state VARCHAR,
    date_time TIMESTAMP(3) NOT NULL LATENESS INTERVAL 4 SECONDS,
    extra VARCHAR
) WITH ('append_only' = 'true', 'connectors' = '[{"transport": {"name": "nexmark", "config": {
    "table": "person",
    "options": {"events": {events}, "threads": {threads}, "batch_size_per_thread": 10000}
}}}]');

CREATE TABLE auction (
    id BIGINT,
    itemName VARCHAR,
    description VARCHAR,
    initialBid BIGINT,
    reserve BIGINT,
    date_time TIMESTAMP(3) NOT NULL LATENESS INTERVAL 4 SECONDS,
    expires TIMESTAMP(3),
    seller BIGINT,
    category BIGINT,
    extra VARCHAR
) WITH ('append_only' = 'true', 'connectors' = '[{"transport": {"name": "nexmark", "config": {"table": "auction"}}}]');

CREATE TABLE bid (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel VARCHAR,
    url VARCHAR,
    date_time TIMESTAMP(3) NOT NULL LATENESS INTERVAL 4 SECONDS,
    extra VARCHAR
) WITH ('append_only' = 'true', 'connectors' = '[{"transport": {"name": "nexmark", "config": {"table": "bid"}}}]');
