-- Q8, monitor new users: people who opened an auction in the 10-second
-- window in which they registered.
CREATE VIEW q8 AS
SELECT p.id, p.name, p.window_start
FROM (
    SELECT id, name, TUMBLE_START(date_time, INTERVAL '10' SECOND) AS window_start
    FROM person
    GROUP BY id, name, TUMBLE(date_time, INTERVAL '10' SECOND)
) AS p
JOIN (
    SELECT seller, TUMBLE_START(date_time, INTERVAL '10' SECOND) AS window_start
    FROM auction
    GROUP BY seller, TUMBLE(date_time, INTERVAL '10' SECOND)
) AS a ON p.id = a.seller AND p.window_start = a.window_start;
