-- Q7, highest bid: the bids at the highest price of each 10-second window.
CREATE VIEW q7 AS
SELECT b.auction, b.price, b.bidder, b.date_time, b.extra
FROM bid AS b
JOIN (
    SELECT MAX(price) AS max_price, TUMBLE_END(date_time, INTERVAL '10' SECOND) AS window_end
    FROM bid
    GROUP BY TUMBLE(date_time, INTERVAL '10' SECOND)
) AS m ON b.price = m.max_price
WHERE b.date_time BETWEEN m.window_end - INTERVAL '10' SECOND AND m.window_end;
