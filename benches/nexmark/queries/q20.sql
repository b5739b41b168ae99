-- Q20, expand bids with their auction: bids on auctions of category 10,
-- with the auction's columns.
CREATE VIEW q20 AS
SELECT b.auction, b.bidder, b.price, b.channel, b.url, b.date_time, b.extra,
       a.itemName, a.description, a.initialBid, a.reserve, a.date_time AS auction_date_time,
       a.expires, a.seller, a.category, a.extra AS auction_extra
FROM bid AS b
JOIN auction AS a ON b.auction = a.id
WHERE a.category = 10;
