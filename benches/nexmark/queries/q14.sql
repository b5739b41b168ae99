-- Q14, calculation: prices in euros within a range, the part of the day,
-- and a user-defined function over a string.
CREATE FUNCTION count_char(s VARCHAR, c CHAR) RETURNS INT
AS LENGTH(s) - LENGTH(REPLACE(s, c, ''));

CREATE VIEW q14 AS
SELECT auction, bidder, 0.908 * price AS price,
       CASE
           WHEN HOUR(date_time) BETWEEN 8 AND 18 THEN 'dayTime'
           WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime'
           ELSE 'otherTime'
       END AS bid_time_type,
       date_time, extra, count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;
