-- Q16, channel statistics per day: Q15's figures per channel, with the
-- minute of the last bid.
CREATE VIEW q16 AS
SELECT channel,
       CAST(date_time AS DATE) AS day,
       FORMAT_TIMESTAMP('%H:%M', MAX(date_time)) AS minute,
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
GROUP BY channel, CAST(date_time AS DATE);
