-- Q15, bidding statistics per day: bids, bidders and auctions, in three
-- price ranks.
CREATE VIEW q15 AS
SELECT CAST(date_time AS DATE) AS day,
       COUNT(*) AS total_bids,
       COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
       COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
       COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
       COUNT(DISTINCT bidder) AS total_bidders,
       COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
       COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
       COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
       COUNT(DISTINCT auction) AS total_auctions,
       COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
       COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
       COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
FROM bid
GROUP BY CAST(date_time AS DATE);
