-- Q9, winning bids: each auction with its highest bid placed while it was
-- open (the earliest such bid on a tie).
CREATE VIEW q9 AS
SELECT id, itemName, description, initialBid, reserve, date_time, expires, seller, category, extra,
       auction, bidder, price, bid_date_time, bid_extra
FROM (
    SELECT a.*, b.auction, b.bidder, b.price, b.date_time AS bid_date_time, b.extra AS bid_extra,
           ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY b.price DESC, b.date_time ASC) AS rank
    FROM auction AS a
    JOIN bid AS b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
) AS ranked
WHERE rank = 1;
