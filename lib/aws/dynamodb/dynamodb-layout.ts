/**
 * Item layout and value codec of the DynamoDB state table (see dynamodb-state.ts for
 * the whole picture). Pure functions, so the layout can be tested and reasoned about
 * without a table.
 */
import { createHash } from 'node:crypto';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { PartitionScope, TimerEntry } from '../../state/backend.ts';
import { timerId } from '../../state/backend.ts';

/** What an item of a commit holds; the cost breakdown counts write units per kind. */
export type ItemKind = 'state' | 'timer' | 'outbox' | 'log' | 'input';
/** Accounting service of that breakdown: descriptive only, never priced (the requests are, under 'dynamodb'). */
export const ITEM_KINDS_SERVICE = 'dynamodb-items';

/** DynamoDB's item limit (attribute names plus values). */
export const MAX_ITEM_BYTES = 400 * 1024;
/** TransactWriteItems limits: 100 distinct items, 4 MB. We stay under the size with room for request overhead. */
export const MAX_TX_ITEMS = 100;
export const MAX_TX_BYTES = 3_500_000;
/** Sort keys are at most 1024 bytes; longer entity or field names are hashed. */
const MAX_SK_BYTES = 1024;
const MAX_ENTITY_KEY_BYTES = 512;
/**
 * Text chunks (outbox, redo log) of at most this many UTF-16 units: at most 3 UTF-8
 * bytes per unit, so a chunk item stays near 300 KB, under the 400 KB item limit.
 */
export const CHUNK_UNITS = 100_000;

/** Ends the entity part of a state sort key; never appears inside it (escaped). */
const TERM = '\u0001';
const ESC = '\u0002';

/**
 * Sort-key form of an entity: \u0002 -> \u0002\u0002 and \u0001 -> \u0002\u0003, so it
 * contains no TERM and `entityKey(E) + TERM` is a prefix of the sort keys of E's fields
 * only (never of an entity that merely starts with E). Very long entities are hashed
 * (`\u0002h` + sha256, a form the escaping never produces) and keep their name in `e`.
 */
export function entityKey(entity: string): { key: string; hashed: boolean } {
  const esc = entity.replace(/[\u0001\u0002]/g, (c) => (c === ESC ? ESC + ESC : ESC + '\u0003'));
  if (Buffer.byteLength(esc) <= MAX_ENTITY_KEY_BYTES) return { key: esc, hashed: false };
  return { key: ESC + 'h' + sha256(entity), hashed: true };
}

export function entityPrefix(entity: string): string {
  return entityKey(entity).key + TERM;
}

/** The entity part (entityKey().key) of a state item's sort key: everything before the first TERM. */
export function entityKeyOfSk(sk: string): string {
  const i = sk.indexOf(TERM);
  return i < 0 ? sk : sk.slice(0, i);
}

/** Sort key of one field of an entity; `fieldAttr` is set when the field had to be hashed. */
export function stateSortKey(entity: string, field: string): { sk: string; entityAttr?: string; fieldAttr?: string } {
  const e = entityKey(entity);
  const prefix = e.key + TERM;
  const entityAttr = e.hashed ? entity : undefined;
  if (Buffer.byteLength(prefix) + Buffer.byteLength(field) <= MAX_SK_BYTES) return { sk: prefix + field, entityAttr };
  return { sk: prefix + ESC + 'h' + sha256(field), entityAttr, fieldAttr: field };
}

/** The field a state item holds, from its sort key (or its `f` attribute when hashed). */
export function fieldOfItem(entity: string, item: { sk: string; f?: string }): string {
  return item.f ?? item.sk.slice(entityPrefix(entity).length);
}

/** State belongs to the stage and key group, not to a partition: rescaling moves key groups. */
export function statePk(scope: PartitionScope, kg: number): string {
  return `${scope.job}#s#${scope.stage}#${kg}`;
}

/** Control items of one partition: version and progress, timers, outbox, redo log. */
export function controlPk(scope: PartitionScope): string {
  return `${scope.job}#p#${scope.stage}#${scope.partition}`;
}

export const VERSION_SK = '#';
export const OUTBOX_PREFIX = 'o#';
export const TIMER_PREFIX = 't#';
export const LOG_PREFIX = 'x#';
/** State log entries (dynamodb-state-log.ts): sort before the outbox, so recover() reads them in one range. */
export const STATE_LOG_PREFIX = 'l#';

export function stateLogSk(version: number, chunk: number): string {
  return `${STATE_LOG_PREFIX}${pad(version, 16)}#${pad(chunk, 4)}`;
}

export function versionOfStateLogSk(sk: string): number {
  return Number(sk.slice(STATE_LOG_PREFIX.length, STATE_LOG_PREFIX.length + 16));
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, '0');
}

/** 16 digits hold every safe integer, so sort order is numeric order. */
export function outboxSk(version: number, chunk: number): string {
  return `${OUTBOX_PREFIX}${pad(version, 16)}#${pad(chunk, 4)}`;
}

/** Upper bound (inclusive) of the outbox sort keys of versions <= version. */
export function outboxSkUpTo(version: number): string {
  return `${OUTBOX_PREFIX}${pad(version, 16)}#~`;
}

export function versionOfOutboxSk(sk: string): number {
  return Number(sk.slice(OUTBOX_PREFIX.length, OUTBOX_PREFIX.length + 16));
}

/**
 * How a commit's outbox is stored. Write units are billed per KB of item (twice in a
 * transaction), an S3 PUT costs as much as 8 write units whatever its size, so:
 * - up to `inlineBytes` of JSON: the text itself, in `v` chunks (as it always was);
 * - larger: gzip; when that fits in `inlineBytes`, base64 in `z` chunks;
 * - still larger and a blob store is there: one immutable object, content-addressed (a
 *   stale writer at the same version can never overwrite the owner's), written before
 *   the transaction, whose item `b` names it. Without a blob store: `z` chunks.
 */
export type StoredOutbox =
  | { readonly kind: 'v' | 'z'; readonly chunks: readonly string[] }
  | { readonly kind: 'b'; readonly key: string; readonly body: Uint8Array };

/** 4 KB: a transactional write of 4 KB costs 8 write units, the price of one S3 PUT. */
export const OUTBOX_INLINE_BYTES = 4096;

export function storeOutbox(json: string, scope: PartitionScope, version: number, options: { inlineBytes?: number; blobs: boolean }): StoredOutbox {
  const inline = options.inlineBytes ?? OUTBOX_INLINE_BYTES;
  if (Buffer.byteLength(json) <= inline) return { kind: 'v', chunks: splitText(json) };
  const gz = gzipSync(json, { level: 6 });
  if (gz.byteLength > inline && options.blobs) {
    const sha = createHash('sha256').update(gz).digest('hex');
    return { kind: 'b', key: `spill/${scope.job}/outbox/${scope.stage}/${scope.partition}/${pad(version, 16)}-${sha}.json.gz`, body: gz };
  }
  return { kind: 'z', chunks: splitText(gz.toString('base64')) };
}

/** The outbox JSON of one version from its items in sort-key order; `fetch` reads a named object. */
export async function loadOutbox(items: readonly { v?: unknown; z?: unknown; b?: unknown }[], fetch: (key: string) => Promise<Uint8Array>): Promise<string> {
  if (items.length === 1 && typeof items[0].b === 'string') return gunzipSync(await fetch(items[0].b)).toString('utf8');
  if (items.every((it) => typeof it.z === 'string')) return gunzipSync(Buffer.from(items.map((it) => String(it.z)).join(''), 'base64')).toString('utf8');
  return items.map((it) => String(it.v)).join('');
}

export function timerSk(t: TimerEntry): string {
  const id = timerId(t);
  // timerId starts with the domain name, so the hashed form `h:` cannot collide with it.
  return TIMER_PREFIX + (Buffer.byteLength(id) <= MAX_SK_BYTES - 8 ? id : 'h:' + sha256(id));
}

export function logSk(commitId: string, chunk: number): string {
  return `${LOG_PREFIX}${commitId}#${pad(chunk, 4)}`;
}

function sha256(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

/**
 * Values are stored as JSON text with tags for what JSON loses, so a value reads back
 * exactly as the in-memory store would hold it: non-finite numbers and -0 (watermarks
 * start at -Infinity), undefined in arrays and objects. A user object that happens to
 * have the tag key is wrapped, so decoding is unambiguous.
 */
const TAG = '\u0000';

function replacer(this: unknown, _key: string, v: unknown): unknown {
  if (typeof v === 'number') {
    if (Number.isFinite(v)) return Object.is(v, -0) ? { [TAG]: '-0' } : v;
    return { [TAG]: String(v) };
  }
  if (v === undefined) return { [TAG]: 'u' };
  if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, TAG)) {
    return { [TAG]: 'o', e: Object.entries(v as object) };
  }
  return v;
}

export function encodeValue(v: unknown): string {
  return JSON.stringify(v, replacer);
}

function revive(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(revive);
  const o = v as Record<string, unknown>;
  if (Object.prototype.hasOwnProperty.call(o, TAG)) {
    switch (o[TAG]) {
      case 'u':
        return undefined;
      case '-0':
        return -0;
      case 'NaN':
        return Number.NaN;
      case 'Infinity':
        return Number.POSITIVE_INFINITY;
      case '-Infinity':
        return Number.NEGATIVE_INFINITY;
      case 'o': {
        const out: Record<string, unknown> = {};
        for (const [k, x] of o.e as [string, unknown][]) out[k] = revive(x);
        return out;
      }
    }
  }
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(o)) out[k] = revive(o[k]);
  return out;
}

export function decodeValue(s: string): unknown {
  return revive(JSON.parse(s));
}

/** Split text into chunks of at most CHUNK_UNITS UTF-16 units, never inside a surrogate pair. */
export function splitText(text: string, units = CHUNK_UNITS): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    let end = Math.min(i + units, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    out.push(text.slice(i, end));
    i = end;
  }
  return out.length ? out : [''];
}

/** Item size by DynamoDB's rules: UTF-8 bytes of attribute names and string values, numbers up to 21 bytes. */
export function itemBytes(item: Record<string, unknown>): number {
  let n = 0;
  for (const [k, v] of Object.entries(item)) {
    if (v === undefined) continue;
    n += Buffer.byteLength(k);
    if (typeof v === 'string') n += Buffer.byteLength(v);
    else if (typeof v === 'number') n += Math.min(21, 1 + Math.ceil(String(Math.abs(v)).replace(/[.-]/g, '').length / 2));
    else n += Buffer.byteLength(JSON.stringify(v));
  }
  return n;
}
