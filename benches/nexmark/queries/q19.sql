-- Q19, top ten: the ten highest bids of each auction.
CREATE VIEW q19 AS
SELECT *
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank
    FROM bid
) AS ranked
WHERE rank <= 10;
