-- Q1, currency conversion: bid prices in euros.
CREATE VIEW q1 AS
SELECT auction, bidder, 0.908 * price AS price, date_time, extra
FROM bid;
