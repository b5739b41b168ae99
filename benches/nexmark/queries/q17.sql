-- Q17, auction statistics per day: bids in three price ranks, and the
-- lowest, highest, mean and total price.
CREATE VIEW q17 AS
SELECT auction,
       CAST(date_time AS DATE) AS day,
       COUNT(*) AS total_bids,
       COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
       COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
       COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
       MIN(price) AS min_price,
       MAX(price) AS max_price,
       AVG(price) AS avg_price,
       SUM(price) AS sum_price
FROM bid
GROUP BY auction, CAST(date_time AS DATE);
