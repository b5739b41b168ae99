-- Q13, bounded side input join: each bid with the value of its key in a
-- small side table, as of the bid's time.
CREATE TABLE side_input (
    date_time TIMESTAMP,
    key BIGINT,
    value VARCHAR
) WITH ('connectors' = '[{"transport": {"name": "datagen", "config": {"plan": [{
    "limit": 100,
    "fields": {"date_time": {"range": [0, 1000]}, "key": {"range": [0, 100]}}
}]}}}]');

CREATE VIEW q13 AS
SELECT b.auction, b.bidder, b.price, b.date_time, s.value
FROM (SELECT *, auction % 100 AS side_key FROM bid) AS b
LEFT ASOF JOIN side_input AS s
MATCH_CONDITION (b.date_time >= s.date_time)
ON b.side_key = s.key;
