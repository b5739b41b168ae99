-- Q0, pass-through: every bid as it arrives (the cost of ingestion alone).
CREATE VIEW q0 AS
SELECT auction, bidder, price, date_time, extra
FROM bid;
