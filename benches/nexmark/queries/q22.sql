-- Q22, URL directories: the first three directories of each bid's URL.
CREATE VIEW q22 AS
SELECT auction, bidder, price, channel,
       SPLIT_PART(url, '/', 4) AS dir1,
       SPLIT_PART(url, '/', 5) AS dir2,
       SPLIT_PART(url, '/', 6) AS dir3
FROM bid;
