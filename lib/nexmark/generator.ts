/**
 * nexmark-ts v1 event generator (NEXMARK.md section 3). Event n depends only
 * on (config, n): each event gets a fresh PRNG seeded from (seed, n), so
 * ranges can be generated in any order or split across workers.
 */
import type { Auction, Bid, NexmarkEvent, Person } from './model.ts';
import { Rng } from './random.ts';

export interface NexmarkConfig {
  /** uint32 user seed; default 0. */
  seed?: number;
  /** Events (all kinds) per second of event time; default 10 000. */
  ratePerSec?: number;
  /** Epoch ms of event 0; default 2015-07-15T00:00:00Z (Beam's base). */
  baseTime?: number;
}

export const DEFAULT_SEED = 0;
export const DEFAULT_RATE_PER_SEC = 10_000;
export const DEFAULT_BASE_TIME = 1436918400000;

const TOTAL_PROPORTION = 50; // 1 person, 3 auctions, 46 bids per block
const FIRST_PERSON_ID = 1000;
const FIRST_AUCTION_ID = 1000;
const FIRST_CATEGORY_ID = 10;
const NUM_CATEGORIES = 5;
const HOT_BLOCK = 100;
const NUM_ACTIVE_PEOPLE = 1000;
const NUM_IN_FLIGHT_AUCTIONS = 100;
const ID_LEAD = 10;
/** Events needed to create 100 more auctions: floor(100 * 50 / 3). */
const AUCTION_HORIZON_EVENTS = 1666;
const POOL_SIZE = 8192;
const CHANNELS_NUMBER = 10_000;

const FIRST_NAMES = ['Peter', 'Paul', 'Luke', 'John', 'Saul', 'Vicky', 'Kate', 'Julie', 'Sarah', 'Deiter', 'Walter'];
const LAST_NAMES = ['Shultz', 'Abrams', 'Spencer', 'White', 'Bartels', 'Walton', 'Smith', 'Jones', 'Noris'];
const CITIES = ['Phoenix', 'Los Angeles', 'San Francisco', 'Boise', 'Portland', 'Bend', 'Redmond', 'Seattle', 'Kent', 'Cheyenne'];
const STATES = ['AZ', 'CA', 'ID', 'OR', 'WA', 'WY'];
const HOT_CHANNELS = ['Google', 'Facebook', 'Baidu', 'Apple'];

// Lookup-table seeds (section 3.6): ASCII "extr", "hotu", "chnl".
const POOL_SEED = 0x65787472;
const HOT_URL_SEED = 0x686f7475;
const CHANNEL_URL_SEED = 0x63686e6c;

interface Tables {
  pool: string;
  hotUrls: string[];
  channelUrls: string[];
}

let tables: Tables | undefined;

/** Built once on first use (~10k small PRNG runs), independent of the user seed. */
function getTables(): Tables {
  if (tables) return tables;
  const g = new Rng(POOL_SEED, 0);
  const chars: string[] = new Array(POOL_SIZE);
  for (let i = 0; i < POOL_SIZE; i++) chars[i] = String.fromCharCode(97 + g.int(26));
  const hotUrls: string[] = [];
  for (let i = 0; i < HOT_CHANNELS.length; i++) hotUrls.push(baseUrl(g.reseed(HOT_URL_SEED, i)));
  const channelUrls: string[] = new Array(CHANNELS_NUMBER);
  for (let k = 0; k < CHANNELS_NUMBER; k++) {
    g.reseed(CHANNEL_URL_SEED, k);
    let u = baseUrl(g);
    // |int32| taken in 64 bits: reverseBits32(1) = -2^31 gives 2147483648.
    if (g.int(10) > 0) u += '&channel_id=' + Math.abs(reverseBits32(k) | 0);
    channelUrls[k] = u;
  }
  tables = { pool: chars.join(''), hotUrls, channelUrls };
  return tables;
}

function baseUrl(g: Rng): string {
  return (
    'https://www.nexmark.com/' + g.string(5, '_') + '/' + g.string(5, '_') + '/' + g.string(5, '_') + '/item.htm?query=1'
  );
}

/** Bit reversal of a uint32 (Java's Integer.reverse); result as uint32. */
export function reverseBits32(x: number): number {
  x = ((x >>> 1) & 0x55555555) | ((x & 0x55555555) << 1);
  x = ((x >>> 2) & 0x33333333) | ((x & 0x33333333) << 2);
  x = ((x >>> 4) & 0x0f0f0f0f) | ((x & 0x0f0f0f0f) << 4);
  x = ((x >>> 8) & 0x00ff00ff) | ((x & 0x00ff00ff) << 8);
  return ((x >>> 16) | (x << 16)) >>> 0;
}

/** Event time of event n: B + floor(n * 1000 / R). */
export function timestamp(n: number, config: NexmarkConfig = {}): number {
  const rate = config.ratePerSec ?? DEFAULT_RATE_PER_SEC;
  const base = config.baseTime ?? DEFAULT_BASE_TIME;
  return base + Math.floor((n * 1000) / rate);
}

/** Kind of event n, fixed by n mod 50. */
export function eventType(n: number): NexmarkEvent['type'] {
  const r = n % TOTAL_PROPORTION;
  return r < 1 ? 'person' : r < 4 ? 'auction' : 'bid';
}

/** Newest person id (base 0) at or before event n. */
export function lastPerson(n: number): number {
  return Math.floor(n / TOTAL_PROPORTION);
}

/** Newest auction id (base 0) at or before event n; -1 before the first. */
export function lastAuction(n: number): number {
  const e = Math.floor(n / TOTAL_PROPORTION);
  const r = n % TOTAL_PROPORTION;
  if (r < 1) return (e - 1) * 3 + 2;
  if (r >= 4) return e * 3 + 2;
  return e * 3 + (r - 1);
}

/** A recent person, possibly up to ID_LEAD ids in the future (base 0). */
function randomPerson(g: Rng, n: number): number {
  const k = lastPerson(n) + 1;
  const active = Math.min(k, NUM_ACTIVE_PEOPLE);
  return k - active + g.int(active + ID_LEAD);
}

/** A recent auction, possibly up to ID_LEAD ids in the future (base 0). */
function randomAuction(g: Rng, n: number): number {
  const hi = lastAuction(n);
  const lo = Math.max(hi - NUM_IN_FLIGHT_AUCTIONS, 0);
  return lo + g.int(hi - lo + 1 + ID_LEAD);
}

/** Filler slice of the pool, sized so records average `avg` bytes. */
function extra(g: Rng, pool: string, current: number, avg: number): string {
  if (current > avg) return '';
  const d = avg - current;
  const delta = Math.floor((d + 2) / 5);
  const len = d - delta + (delta === 0 ? 0 : g.int(2 * delta));
  const off = g.int(POOL_SIZE - len);
  return pool.slice(off, off + len);
}

function pad4(x: number): string {
  return x < 10 ? '000' + x : x < 100 ? '00' + x : x < 1000 ? '0' + x : '' + x;
}

// Generation is synchronous, so one reusable PRNG is safe and avoids an
// allocation per event.
const shared = new Rng();

/** Event number n (n >= 0 integer), independent of any other event. */
export function generateEvent(n: number, config: NexmarkConfig = {}): NexmarkEvent {
  const seed = (config.seed ?? DEFAULT_SEED) >>> 0;
  const t = getTables();
  const g = shared.reseed(seed, n);
  const ts = timestamp(n, config);
  const r = n % TOTAL_PROPORTION;
  if (r < 1) return person(g, t, n, ts);
  if (r < 4) return auction(g, t, n, ts, timestamp(n + AUCTION_HORIZON_EVENTS, config) - ts);
  return bid(g, t, n, ts);
}

function person(g: Rng, t: Tables, n: number, ts: number): Person {
  const id = FIRST_PERSON_ID + lastPerson(n);
  const name = FIRST_NAMES[g.int(11)] + ' ' + LAST_NAMES[g.int(9)];
  const emailAddress = g.string(7) + '@' + g.string(5) + '.com';
  const c1 = pad4(g.int(10000));
  const c2 = pad4(g.int(10000));
  const c3 = pad4(g.int(10000));
  const c4 = pad4(g.int(10000));
  const creditCard = c1 + ' ' + c2 + ' ' + c3 + ' ' + c4;
  const city = CITIES[g.int(10)];
  const state = STATES[g.int(6)];
  const size = 8 + name.length + emailAddress.length + creditCard.length + city.length + state.length;
  const ex = extra(g, t.pool, size, 200);
  return { type: 'person', id, name, emailAddress, creditCard, city, state, dateTime: ts, extra: ex };
}

function auction(g: Rng, t: Tables, n: number, ts: number, horizon: number): Auction {
  const id = FIRST_AUCTION_ID + lastAuction(n);
  const seller =
    FIRST_PERSON_ID + (g.int(4) > 0 ? Math.floor(lastPerson(n) / HOT_BLOCK) * HOT_BLOCK : randomPerson(g, n));
  const category = FIRST_CATEGORY_ID + g.int(NUM_CATEGORIES);
  const initialBid = g.price();
  const expires = ts + 1 + g.int(Math.max(2 * horizon, 1));
  const itemName = g.string(20);
  const description = g.string(100);
  const reserve = initialBid + g.price();
  const ex = extra(g, t.pool, 8 + itemName.length + description.length + 40, 500);
  return {
    type: 'auction', id, itemName, description, initialBid, reserve,
    dateTime: ts, expires, seller, category, extra: ex,
  };
}

function bid(g: Rng, t: Tables, n: number, ts: number): Bid {
  const auctionId =
    FIRST_AUCTION_ID + (g.int(2) > 0 ? Math.floor(lastAuction(n) / HOT_BLOCK) * HOT_BLOCK : randomAuction(g, n));
  // Hot bidder = hot seller + 1, so the two hot roles are different people.
  const bidder =
    FIRST_PERSON_ID + (g.int(4) > 0 ? Math.floor(lastPerson(n) / HOT_BLOCK) * HOT_BLOCK + 1 : randomPerson(g, n));
  const price = g.price();
  let channel: string;
  let url: string;
  if (g.int(2) > 0) {
    const i = g.int(4);
    channel = HOT_CHANNELS[i];
    url = t.hotUrls[i];
  } else {
    const k = g.int(CHANNELS_NUMBER);
    channel = 'channel-' + k;
    url = t.channelUrls[k];
  }
  const ex = extra(g, t.pool, 32, 100);
  return { type: 'bid', auction: auctionId, bidder, price, channel, url, dateTime: ts, extra: ex };
}

/** Events from, from+1, ..., from+count-1 in order. */
export function* generateEvents(from: number, count: number, config: NexmarkConfig = {}): Generator<NexmarkEvent> {
  for (let n = from; n < from + count; n++) yield generateEvent(n, config);
}

/**
 * One JSON line (section 2.4), no trailing newline. Hand-built rather than
 * JSON.stringify: generated strings never need escaping and this is the
 * hot path of file generation.
 */
export function serializeEvent(e: NexmarkEvent): string {
  switch (e.type) {
    case 'person':
      return (
        '{"type":"person","id":' + e.id + ',"name":"' + e.name + '","emailAddress":"' + e.emailAddress +
        '","creditCard":"' + e.creditCard + '","city":"' + e.city + '","state":"' + e.state +
        '","dateTime":' + e.dateTime + ',"extra":"' + e.extra + '"}'
      );
    case 'auction':
      return (
        '{"type":"auction","id":' + e.id + ',"itemName":"' + e.itemName + '","description":"' + e.description +
        '","initialBid":' + e.initialBid + ',"reserve":' + e.reserve + ',"dateTime":' + e.dateTime +
        ',"expires":' + e.expires + ',"seller":' + e.seller + ',"category":' + e.category +
        ',"extra":"' + e.extra + '"}'
      );
    case 'bid':
      return (
        '{"type":"bid","auction":' + e.auction + ',"bidder":' + e.bidder + ',"price":' + e.price +
        ',"channel":"' + e.channel + '","url":"' + e.url + '","dateTime":' + e.dateTime +
        ',"extra":"' + e.extra + '"}'
      );
  }
}
