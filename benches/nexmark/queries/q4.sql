-- Q4, average price per category: the winning (highest) bid of each
-- auction, placed while it was open, averaged per category.
CREATE VIEW q4 AS
SELECT winners.category, AVG(winners.final) AS avg_final
FROM (
    SELECT a.id, a.category, MAX(b.price) AS final
    FROM auction AS a
    JOIN bid AS b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category
) AS winners
GROUP BY winners.category;
