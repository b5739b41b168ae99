-- Q3, local item suggestion: who sells in category 10 in Oregon, Idaho or
-- California (a join of auctions with their sellers).
CREATE VIEW q3 AS
SELECT p.name, p.city, p.state, a.id
FROM auction AS a
JOIN person AS p ON a.seller = p.id
WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA');
