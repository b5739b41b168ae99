-- Q5, hot items: the auctions with the most bids in each 10-second window,
-- sliding every 2 seconds.
CREATE VIEW q5 AS
WITH counts AS (
    SELECT auction, window_start, window_end, COUNT(*) AS num
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
),
most AS (
    SELECT window_start, window_end, MAX(num) AS max_num
    FROM counts
    GROUP BY window_start, window_end
)
SELECT c.auction, c.num
FROM counts AS c
JOIN most AS m ON c.window_start = m.window_start AND c.window_end = m.window_end
WHERE c.num >= m.max_num;
