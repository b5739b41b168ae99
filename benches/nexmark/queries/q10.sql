-- Q10, log to a file system: every bid with the day and minute it would be
-- partitioned by.
CREATE VIEW q10 AS
SELECT auction, bidder, price, date_time, extra,
       FORMAT_TIMESTAMP('%Y-%m-%d', date_time) AS dt,
       FORMAT_TIMESTAMP('%H:%M', date_time) AS hm
FROM bid;
