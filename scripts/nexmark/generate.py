"""Writes a Nexmark-shaped stream as CSV: persons, auctions and bids (1:3:46),
times advancing with jitter of up to 3 s (inside a 4 s lateness), split into
six step files per table (`<table>-<step>.csv`) and one whole file
(`<table>-all.csv`)."""
import csv
import datetime
import random
import sys

events = int(sys.argv[1])
random.seed(7)
base = datetime.datetime(2024, 1, 1, 10, 0, 0)


def ts(ms):
    return (base + datetime.timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


clock = 0
bids, persons, auctions = [], [], []
for i in range(events):
    clock += random.randint(0, 20)
    t = clock - random.randint(0, 3000)
    if i % 50 == 0:
        persons.append((i // 50, f"p{i // 50}", "e", "c", "city", "OR", ts(t), ""))
    elif i % 50 in (1, 2, 3):
        auctions.append((len(auctions), "item", "d", 10, 100, ts(t), ts(t + 20000),
                         random.randint(0, len(persons)), random.randint(10, 14), ""))
    else:
        bids.append((random.randint(0, max(0, len(auctions) - 1)), random.randint(0, 200),
                     random.randint(1, 10000) * random.choice([1, 1, 1, 100]),
                     random.choice(["apple", "google", "baidu", "x"]),
                     "https://www.nexmark.com/a/b/c/d/item.htm?query=1&channel_id=9", ts(t), ""))
for name, rows in [("bid", bids), ("person", persons), ("auction", auctions)]:
    n = len(rows)
    for s in range(6):
        with open(f"{name}-{s}.csv", "w", newline="") as f:
            csv.writer(f).writerows(rows[s * n // 6:(s + 1) * n // 6])
    with open(f"{name}-all.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
print(f"{len(persons)} persons, {len(auctions)} auctions, {len(bids)} bids")
