-- Q21, channel ids: the hot channels' numbers, or the `channel_id`
-- parameter of the bid's URL.
CREATE VIEW q21 AS
SELECT auction, bidder, price, channel,
       CASE LOWER(channel)
           WHEN 'apple' THEN '0'
           WHEN 'google' THEN '1'
           WHEN 'facebook' THEN '2'
           WHEN 'baidu' THEN '3'
           ELSE REGEXP_MATCH(url, '(&|^)channel_id=([^&]*)')[2]
       END AS channel_id
FROM bid
WHERE LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')
   OR REGEXP_MATCH(url, '(&|^)channel_id=([^&]*)')[2] IS NOT NULL;
