-- Q12, windows of (event) time: bids per bidder per 10-second window.
CREATE VIEW q12 AS
SELECT bidder, COUNT(*) AS bid_count,
       TUMBLE_START(date_time, INTERVAL '10' SECOND) AS starttime,
       TUMBLE_END(date_time, INTERVAL '10' SECOND) AS endtime
FROM bid
GROUP BY bidder, TUMBLE(date_time, INTERVAL '10' SECOND);
