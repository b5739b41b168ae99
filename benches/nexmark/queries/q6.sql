-- Q6, average selling price per seller: the mean of the winning bids of
-- each seller's last ten closed auctions.
CREATE VIEW q6 AS
WITH winners AS (
    SELECT a.id, a.seller, a.date_time, MAX(b.price) AS final
    FROM auction AS a
    JOIN bid AS b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.seller, a.date_time
)
SELECT seller,
       AVG(final) OVER (PARTITION BY seller ORDER BY date_time ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_price
FROM winners;
