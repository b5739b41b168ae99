-- Q11, user sessions: bids per bidder in sessions closed by 10 seconds
-- without a bid.
CREATE VIEW q11 AS
SELECT bidder, COUNT(*) AS bid_count,
       SESSION_START(date_time, INTERVAL '10' SECOND) AS starttime,
       SESSION_END(date_time, INTERVAL '10' SECOND) AS endtime
FROM bid
GROUP BY bidder, SESSION(date_time, INTERVAL '10' SECOND);
