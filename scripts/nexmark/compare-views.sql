-- Views over Feldera's query views, keeping the columns compared with DuckDB.
CREATE VIEW c5 AS SELECT auction, num FROM q5;
CREATE VIEW c7 AS SELECT auction, price, bidder FROM q7;
CREATE VIEW c8 AS SELECT id, name, CAST(EXTRACT(EPOCH FROM starttime) AS BIGINT) AS s FROM q8;
CREATE VIEW c12 AS SELECT bidder, bid_count, CAST(EXTRACT(EPOCH FROM starttime) AS BIGINT) AS s FROM q12;
CREATE VIEW c16 AS SELECT channel, "minute", total_bids, rank1_bids, total_bidders, rank3_auctions FROM q16;
CREATE VIEW c19 AS SELECT auction, price FROM q19;
CREATE VIEW c22 AS SELECT auction, dir1, dir2, dir3 FROM q22 WHERE auction < 5;
