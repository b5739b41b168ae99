//! The Nexmark event generator: events as the Nexmark benchmark defines
//! them (the Beam/Flink generator, with the choices of Feldera's port where
//! the two differ, so that the same queries see the same distributions),
//! built straight into Arrow columns of the three tables.
//!
//! Event `e` (0, 1, 2, …) is a person when `e mod 50 = 0`, an auction when
//! it is 1–3 and a bid otherwise (1:3:46). Person and auction ids are dense
//! from 1000. An auction's seller and a bid's bidder are "hot" (the first
//! or second person of the current block of 100) three times in four, else
//! one of the last 1000 people (or up to 10 not yet created); a bid's
//! auction is hot (the first of the current block of 100 auctions) half
//! the time, else one of the last 100. Prices are log-uniform between $1
//! and $1,000,000 (in cents); 99% of bids come through one of four hot
//! channels. `date_time` is 10 ms × `e` after the Unix epoch; an auction
//! expires 1 ms to 33.3 s after it starts. `extra` pads each event towards
//! an average size (200, 500, 100 bytes).
//!
//! Every draw of event `e` comes from a random generator seeded by `e` (and
//! the connector's `seed`), so an event is a function of its number alone:
//! the same whatever the number of threads, the batching, or a resumption
//! from a checkpoint.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMillisecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use rand::distributions::Alphanumeric;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Events in each period of the proportions, and the kinds' shares.
const PERIOD: u64 = 50;
const PERSONS: u64 = 1;
const AUCTIONS: u64 = 3;
/// The first person, auction and category ids.
const FIRST_PERSON: i64 = 1000;
const FIRST_AUCTION: i64 = 1000;
const FIRST_CATEGORY: i64 = 10;
const CATEGORIES: i64 = 5;
/// People who place auctions and bids, and how far past the last created
/// person an id may reach.
const ACTIVE_PEOPLE: u64 = 1000;
const PERSON_LEAD: u64 = 10;
/// Auctions open at once.
const IN_FLIGHT_AUCTIONS: u64 = 100;
/// Hot ids are the first (second for bidders) of blocks of this many.
const HOT_BLOCK: u64 = 100;
/// One in this many draws is not hot: auctions of bids, bidders, sellers.
const HOT_AUCTION_RATIO: u64 = 2;
const HOT_BIDDER_RATIO: u64 = 4;
const HOT_SELLER_RATIO: u64 = 4;
/// Event time between two consecutive events, in milliseconds.
const INTERVAL_MS: i64 = 10;
/// Average sizes of the events, which `extra` pads towards.
const PERSON_BYTES: usize = 200;
const AUCTION_BYTES: usize = 500;
const BID_BYTES: usize = 100;
/// Channels of non-hot bids.
const CHANNELS: u32 = 10_000;

const FIRST_NAMES: &[&str] = &[
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: &[&str] = &[
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const CITIES: &[&str] = &[
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const STATES: &[&str] = &["AZ", "CA", "ID", "OR", "WA", "WY"];
const HOT_CHANNELS: &[(&str, &str)] = &[
    ("Google", "https://www.nexmark.com/googl/item.htm?query=1"),
    ("Facebook", "https://www.nexmark.com/meta/item.htm?query=1"),
    ("Baidu", "https://www.nexmark.com/bidu/item.htm?query=1"),
    ("Apple", "https://www.nexmark.com/aapl/item.htm?query=1"),
];

/// The three tables, in the order their rows are fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    /// New people.
    Person,
    /// New auctions.
    Auction,
    /// Bids.
    Bid,
}

impl Table {
    /// All three, in feeding order.
    pub const ALL: [Table; 3] = [Table::Person, Table::Auction, Table::Bid];

    /// The name used in connector configs.
    pub fn name(self) -> &'static str {
        match self {
            Table::Person => "person",
            Table::Auction => "auction",
            Table::Bid => "bid",
        }
    }

    /// The kind of event `e`.
    pub fn of_event(e: u64) -> Table {
        match e % PERIOD {
            r if r < PERSONS => Table::Person,
            r if r < PERSONS + AUCTIONS => Table::Auction,
            _ => Table::Bid,
        }
    }

    /// The columns the generator produces, by name (compared without
    /// case with a table's columns).
    fn columns(self) -> &'static [&'static str] {
        match self {
            Table::Person => &[
                "id",
                "name",
                "emailaddress",
                "creditcard",
                "city",
                "state",
                "date_time",
                "extra",
            ],
            Table::Auction => &[
                "id",
                "itemname",
                "description",
                "initialbid",
                "reserve",
                "date_time",
                "expires",
                "seller",
                "category",
                "extra",
            ],
            Table::Bid => &[
                "auction",
                "bidder",
                "price",
                "channel",
                "url",
                "date_time",
                "extra",
            ],
        }
    }

    /// Checks that every column of `schema` is one the generator
    /// produces.
    pub fn check(self, schema: &SchemaRef) -> Result<(), String> {
        for f in schema.fields() {
            if !self.columns().contains(&f.name().to_lowercase().as_str()) {
                return Err(format!(
                    "the nexmark {} table has no column '{}' (it has: {})",
                    self.name(),
                    f.name(),
                    self.columns().join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// The id of the last person created by event `e` or before it (base 0).
fn last_person(e: u64) -> u64 {
    // One person opens each period.
    const _: () = assert!(PERSONS == 1);
    e / PERIOD
}

/// The id of the last auction created by event `e` or before it (base 0).
fn last_auction(e: u64) -> u64 {
    let (epoch, offset) = (e / PERIOD, e % PERIOD);
    if offset < PERSONS {
        // A person: the last auction of the period before.
        return (epoch * AUCTIONS + AUCTIONS - 1).saturating_sub(AUCTIONS);
    }
    epoch * AUCTIONS + (offset - PERSONS).min(AUCTIONS - 1)
}

/// One of the active people, or one about to be created (base 0).
fn some_person(e: u64, rng: &mut SmallRng) -> u64 {
    let people = last_person(e) + 1;
    let active = people.min(ACTIVE_PEOPLE);
    people - active + rng.gen_range(0..active + PERSON_LEAD)
}

/// One of the auctions in flight (base 0).
fn some_auction(e: u64, rng: &mut SmallRng) -> u64 {
    let last = last_auction(e);
    let first = last.saturating_sub(IN_FLIGHT_AUCTIONS);
    rng.gen_range(first..=last)
}

/// A price in cents, log-uniform between $1 and $1,000,000.
fn price(rng: &mut SmallRng) -> i64 {
    (10f64.powf(rng.gen::<f64>() * 6.0) * 100.0).round() as i64
}

/// Appends `n` random letters and digits to `out`.
fn push_alphanumeric(out: &mut String, n: usize, rng: &mut SmallRng) {
    out.extend((0..n).map(|_| char::from(rng.sample(Alphanumeric))));
}

/// A string of 3 to `max` letters and digits.
fn string(max: usize, rng: &mut SmallRng) -> String {
    let mut s = String::new();
    let n = rng.gen_range(3..=max);
    push_alphanumeric(&mut s, n, rng);
    s
}

/// Padding that brings an event of `size` bytes to `average` on average
/// (within ±20% of the gap).
fn extra(size: usize, average: usize, rng: &mut SmallRng) -> String {
    let mut s = String::new();
    if size < average {
        let gap = average - size;
        let delta = (gap as f64 * 0.2).round() as usize;
        if delta > 0 {
            let n = rng.gen_range(gap - delta..=gap + delta);
            push_alphanumeric(&mut s, n, rng);
        }
    }
    s
}

/// The random generator of event `e`.
fn event_rng(seed: u64, e: u64) -> SmallRng {
    SmallRng::seed_from_u64(e ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The name and URL of a channel that is not hot: its own, from a
/// generator seeded by its number.
fn channel(number: u32) -> (String, String) {
    let mut rng = SmallRng::seed_from_u64(u64::from(number));
    let mut url = format!(
        "https://www.nexmark.com/{}/item.htm?query=1",
        string(5, &mut rng)
    );
    if rng.gen_range(0..10) != 9 {
        url.push_str(&format!("&channel_id={}", number.reverse_bits()));
    }
    (format!("channel-{number}"), url)
}

/// Columns being built for one table.
struct Columns {
    ints: Vec<(&'static str, Int64Builder)>,
    strings: Vec<(&'static str, StringBuilder)>,
    times: Vec<(&'static str, TimestampMillisecondBuilder)>,
}

impl Columns {
    fn new(ints: &[&'static str], strings: &[&'static str], times: &[&'static str]) -> Self {
        Self {
            ints: ints.iter().map(|n| (*n, Int64Builder::new())).collect(),
            strings: strings.iter().map(|n| (*n, StringBuilder::new())).collect(),
            times: times
                .iter()
                .map(|n| (*n, TimestampMillisecondBuilder::new()))
                .collect(),
        }
    }

    /// Appends a row: its integers, strings and times, each in the order
    /// the columns were declared in [`Columns::new`].
    fn push(&mut self, ints: &[i64], strings: &[&str], times: &[i64]) {
        for ((_, b), v) in self.ints.iter_mut().zip(ints) {
            b.append_value(*v);
        }
        for ((_, b), v) in self.strings.iter_mut().zip(strings) {
            b.append_value(v);
        }
        for ((_, b), v) in self.times.iter_mut().zip(times) {
            b.append_value(*v);
        }
    }

    /// The finished column called `name`, if the table has one.
    fn finish(&mut self, name: &str) -> Option<ArrayRef> {
        let name = name.to_lowercase();
        if let Some((_, b)) = self.ints.iter_mut().find(|(n, _)| *n == name) {
            return Some(Arc::new(b.finish()));
        }
        if let Some((_, b)) = self.strings.iter_mut().find(|(n, _)| *n == name) {
            return Some(Arc::new(b.finish()));
        }
        if let Some((_, b)) = self.times.iter_mut().find(|(n, _)| *n == name) {
            return Some(Arc::new(b.finish()));
        }
        None
    }
}

/// The rows of the three tables for a set of events, being built.
pub struct Events {
    seed: u64,
    person: Columns,
    auction: Columns,
    bid: Columns,
}

impl Events {
    /// No rows yet; draws are seeded by `seed` and each event's number.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            person: Columns::new(
                &["id"],
                &[
                    "name",
                    "emailaddress",
                    "creditcard",
                    "city",
                    "state",
                    "extra",
                ],
                &["date_time"],
            ),
            auction: Columns::new(
                &["id", "initialbid", "reserve", "seller", "category"],
                &["itemname", "description", "extra"],
                &["date_time", "expires"],
            ),
            bid: Columns::new(
                &["auction", "bidder", "price"],
                &["channel", "url", "extra"],
                &["date_time"],
            ),
        }
    }

    /// Adds event `e`.
    pub fn push(&mut self, e: u64) {
        let mut rng = event_rng(self.seed, e);
        let time = e as i64 * INTERVAL_MS;
        match Table::of_event(e) {
            Table::Person => self.push_person(e, time, &mut rng),
            Table::Auction => self.push_auction(e, time, &mut rng),
            Table::Bid => self.push_bid(e, time, &mut rng),
        }
    }

    fn push_person(&mut self, e: u64, time: i64, rng: &mut SmallRng) {
        let first = FIRST_NAMES[rng.gen_range(0..FIRST_NAMES.len())];
        let last = LAST_NAMES[rng.gen_range(0..LAST_NAMES.len())];
        let name = format!("{first} {last}");
        let email = format!("{}@{}.com", string(7, rng), string(5, rng));
        let card = format!(
            "{:04} {:04} {:04} {:04}",
            rng.gen_range(0..10_000),
            rng.gen_range(0..10_000),
            rng.gen_range(0..10_000),
            rng.gen_range(0..10_000)
        );
        let city = CITIES[rng.gen_range(0..CITIES.len())];
        let state = STATES[rng.gen_range(0..STATES.len())];
        let size = 8 + name.len() + email.len() + card.len() + city.len() + state.len();
        let extra = extra(size, PERSON_BYTES, rng);
        self.person.push(
            &[last_person(e) as i64 + FIRST_PERSON],
            &[&name, &email, &card, city, state, &extra],
            &[time],
        );
    }

    fn push_auction(&mut self, e: u64, time: i64, rng: &mut SmallRng) {
        let seller = if rng.gen_range(0..HOT_SELLER_RATIO) > 0 {
            (last_person(e) / HOT_BLOCK) * HOT_BLOCK
        } else {
            some_person(e, rng)
        };
        let category = FIRST_CATEGORY + rng.gen_range(0..CATEGORIES);
        let initial = price(rng);
        // Long enough that about `IN_FLIGHT_AUCTIONS` are open at once.
        let horizon = (IN_FLIGHT_AUCTIONS * PERIOD / AUCTIONS) as i64 * INTERVAL_MS;
        let expires = time + 1 + rng.gen_range(0..2 * horizon);
        let item = string(20, rng);
        let description = string(100, rng);
        let reserve = initial + price(rng);
        let extra = extra(48 + item.len() + description.len(), AUCTION_BYTES, rng);
        self.auction.push(
            &[
                last_auction(e) as i64 + FIRST_AUCTION,
                initial,
                reserve,
                seller as i64 + FIRST_PERSON,
                category,
            ],
            &[&item, &description, &extra],
            &[time, expires],
        );
    }

    fn push_bid(&mut self, e: u64, time: i64, rng: &mut SmallRng) {
        let auction = if rng.gen_range(0..HOT_AUCTION_RATIO) > 0 {
            (last_auction(e) / HOT_BLOCK) * HOT_BLOCK
        } else {
            some_auction(e, rng)
        };
        let bidder = if rng.gen_range(0..HOT_BIDDER_RATIO) > 0 {
            (last_person(e) / HOT_BLOCK) * HOT_BLOCK + 1
        } else {
            some_person(e, rng)
        };
        let price = price(rng);
        let number = rng.gen_range(0..CHANNELS);
        let (channel, url): (Cow<str>, Cow<str>) = if rng.gen_range(0..100) == 0 {
            let (name, url) = channel(number);
            (name.into(), url.into())
        } else {
            let (name, url) = HOT_CHANNELS[rng.gen_range(0..HOT_CHANNELS.len())];
            (name.into(), url.into())
        };
        let extra = extra(32, BID_BYTES, rng);
        self.bid.push(
            &[
                auction as i64 + FIRST_AUCTION,
                bidder as i64 + FIRST_PERSON,
                price,
            ],
            &[&channel, &url, &extra],
            &[time],
        );
    }

    /// The rows of `table` so far as a batch of `schema` (columns matched
    /// by name without case, cast to the declared types), and starts the
    /// table anew.
    pub fn finish(&mut self, table: Table, schema: &SchemaRef) -> Result<RecordBatch, String> {
        let columns = match table {
            Table::Person => &mut self.person,
            Table::Auction => &mut self.auction,
            Table::Bid => &mut self.bid,
        };
        let mut arrays = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let array = columns.finish(f.name()).ok_or_else(|| {
                format!(
                    "the nexmark {} table has no column '{}'",
                    table.name(),
                    f.name()
                )
            })?;
            let array = if array.data_type() == f.data_type() {
                array
            } else {
                cast(&array, f.data_type()).map_err(|e| format!("column '{}': {e}", f.name()))?
            };
            arrays.push(array);
        }
        // Columns the table does not declare are dropped, not carried over.
        for name in table.columns() {
            columns.finish(name);
        }
        RecordBatch::try_new(Arc::clone(schema), arrays).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array, StringArray, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    fn schema(table: Table) -> SchemaRef {
        let fields = table
            .columns()
            .iter()
            .map(|n| {
                let t = match *n {
                    "date_time" | "expires" => DataType::Timestamp(TimeUnit::Millisecond, None),
                    "id" | "initialbid" | "reserve" | "seller" | "category" | "auction"
                    | "bidder" | "price" => DataType::Int64,
                    _ => DataType::Utf8,
                };
                Field::new(*n, t, true)
            })
            .collect::<Vec<_>>();
        Arc::new(Schema::new(fields))
    }

    fn generate(ids: impl Iterator<Item = u64>) -> [RecordBatch; 3] {
        let mut events = Events::new(0);
        for e in ids {
            events.push(e);
        }
        Table::ALL.map(|t| events.finish(t, &schema(t)).unwrap())
    }

    fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
        b.column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref()
            .unwrap()
    }

    fn ints<'a>(b: &'a RecordBatch, name: &str) -> &'a Int64Array {
        column(b, name)
    }

    #[test]
    fn kinds_follow_the_proportions_and_ids_are_dense() {
        let [person, auction, bid] = generate(0..10_000);
        assert_eq!(
            (person.num_rows(), auction.num_rows(), bid.num_rows()),
            (200, 600, 9200)
        );
        let ids: Vec<i64> = ints(&person, "id").values().to_vec();
        assert_eq!(ids, (1000..1200).collect::<Vec<i64>>());
        let ids: Vec<i64> = ints(&auction, "id").values().to_vec();
        assert_eq!(ids, (1000..1600).collect::<Vec<i64>>());
        let times = column::<TimestampMillisecondArray>(&bid, "date_time");
        assert_eq!(times.value(0), 40, "event 4 is the first bid, at 40 ms");
    }

    #[test]
    fn fields_stay_in_their_ranges() {
        let [person, auction, bid] = generate(0..20_000);
        let expires: Vec<i64> = column::<TimestampMillisecondArray>(&auction, "expires")
            .values()
            .to_vec();
        let starts = column::<TimestampMillisecondArray>(&auction, "date_time");
        for (i, x) in expires.iter().enumerate() {
            let length = x - starts.value(i);
            assert!((1..=33_320).contains(&length), "auction length {length}");
        }
        for (a, b) in ints(&auction, "initialbid")
            .values()
            .iter()
            .zip(ints(&auction, "reserve").values())
        {
            assert!(*a >= 100 && b > a && *b <= 200_000_000);
        }
        assert!(ints(&auction, "category")
            .values()
            .iter()
            .all(|c| (10..15).contains(c)));
        // Bids never name a future auction; about half go to a hot one.
        let bid_auctions = ints(&bid, "auction");
        assert!(bid_auctions.values().iter().all(|a| *a < 1000 + 1200));
        let hot = bid_auctions
            .values()
            .iter()
            .filter(|a| *a % 100 == 0)
            .count();
        assert!(
            (0.45..0.6).contains(&(hot as f64 / bid.num_rows() as f64)),
            "{hot}"
        );
        let channels = column::<StringArray>(&bid, "channel");
        let named = (0..channels.len())
            .filter(|&i| channels.value(i).starts_with("channel-"))
            .count();
        assert!(named > 50 && named < 400, "about 1% of bids: {named}");
        let cards = column::<StringArray>(&person, "creditcard");
        assert_eq!(cards.value(0).len(), 19);
        let extra = column::<StringArray>(&bid, "extra");
        assert!((0..extra.len()).all(|i| (54..=82).contains(&extra.value(i).len())));
    }

    #[test]
    fn an_event_depends_only_on_its_number() {
        // All events at once, or split between two "threads" by parity.
        let whole = generate(0..5000);
        let even = generate((0..5000).filter(|e| e % 2 == 0));
        let odd = generate((0..5000).filter(|e| e % 2 == 1));
        let sorted = |batches: &[&RecordBatch], col: &str| {
            let mut v: Vec<i64> = batches
                .iter()
                .flat_map(|b| ints(b, col).values().to_vec())
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(
            sorted(&[&whole[2]], "price"),
            sorted(&[&even[2], &odd[2]], "price")
        );
        assert_eq!(
            sorted(&[&whole[1]], "seller"),
            sorted(&[&even[1], &odd[1]], "seller")
        );
    }

    #[test]
    fn a_channel_id_is_the_reversed_number() {
        let (name, url) = channel(1235);
        assert_eq!(name, "channel-1235");
        assert!(
            url.ends_with("&channel_id=3407872000") || !url.contains("channel_id"),
            "{url}"
        );
        assert!(url.starts_with("https://www.nexmark.com/"));
    }

    #[test]
    fn undeclared_columns_are_refused() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "colour",
            DataType::Utf8,
            true,
        )]));
        assert!(Table::Bid.check(&schema).is_err());
        assert!(Table::Bid.check(&self::schema(Table::Bid)).is_ok());
    }
}
