-- Q2, selection: the bids on a few auctions.
CREATE VIEW q2 AS
SELECT auction, price
FROM bid
WHERE auction % 123 = 0;
