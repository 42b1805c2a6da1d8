/**
 * Generated ingestion requests for the fuzz suites of both endpoints (the embedded HTTP
 * server and the AWS ingest handler): events valid and invalid in every way the
 * validation knows (non-objects, missing or mistyped fields, non-integer, huge and
 * far-future timestamps, duplicate keys, depth around MAX_EVENT_DEPTH, NUL and lone
 * surrogates), bodies as JSON arrays or JSON lines, truncated, corrupted, with an invalid
 * UTF-8 byte or a BOM, under right, wrong and missing content types and encodings, and
 * sizes at the body and event-count limits. Each request carries what the endpoint must
 * answer, and `judge` checks an answer against it.
 */
import fc from 'fast-check';
import { z } from 'zod';
import { MAX_EVENT_DEPTH } from '../../lib/transport/ingest-validation.ts';

/** The fixed seed of every fuzz property (fast-check prints it, with the path, on failure). */
export const FUZZ_SEED = 20261202;
/** The clock of both endpoints: arrival time of every request. */
export const NOW = 1_000_000;
export const MAX_FUTURE_MS = 60_000;
export const MAX_BODY = 4096;
export const MAX_EVENTS = 20;

export const OrderSchema = z.object({ id: z.number().int(), k: z.string(), ts: z.number(), note: z.string().optional() });
export type Order = z.infer<typeof OrderSchema>;
export const KEYS = ['a', 'b', 'c'] as const;

/** One event to send: generated data, turned into JSON text by `render` with a run-unique id. */
export type EventSpec =
  | { t: 'valid'; k: string; ts: number; note?: string }
  /** A valid event with a duplicate key: JSON.parse keeps the last value, `last`. */
  | { t: 'duplicate-key'; k: string; ts: number; last: 'valid' | 'invalid' }
  /** An `extra` member nested `levels` deep: the event is 1 + levels deep. */
  | { t: 'deep'; k: string; levels: number }
  /** A note with NUL or a lone surrogate: the embedded endpoint takes it, SQS may refuse it. */
  | { t: 'odd-chars'; k: string; note: string }
  | { t: 'non-object'; json: string }
  | { t: 'missing'; field: 'id' | 'k' | 'ts' }
  | { t: 'mistyped'; field: 'id' | 'k' | 'ts' | 'note'; json: string }
  /** A number for ts that the schema takes and the event-time check refuses. */
  | { t: 'bad-time'; json: string };

export type Verdict = 'accept' | 'reject' | 'either';

export interface RenderedEvent {
  readonly text: string;
  readonly verdict: Verdict;
  /** For a rejection: the field the reason must start with, and text it must contain (the received value). */
  readonly field?: string;
  readonly received?: string;
}

const nest = (levels: number): string => '{"a":'.repeat(levels) + '0' + '}'.repeat(levels);
const obj = (members: Record<string, string>): string => `{${Object.entries(members).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`;

export function render(spec: EventSpec, id: number): RenderedEvent {
  const base = (k: string, ts: number) => ({ id: String(id), k: JSON.stringify(k), ts: String(ts) });
  switch (spec.t) {
    case 'valid':
      return { text: JSON.stringify({ id, k: spec.k, ts: spec.ts, ...(spec.note === undefined ? {} : { note: spec.note }) }), verdict: 'accept' };
    case 'duplicate-key': {
      const good = String(spec.ts);
      const text = `{"id":${id},"k":${JSON.stringify(spec.k)},"ts":${spec.last === 'valid' ? `"soon","ts":${good}` : `${good},"ts":"soon"`}}`;
      return spec.last === 'valid' ? { text, verdict: 'accept' } : { text, verdict: 'reject', field: 'ts', received: '"soon"' };
    }
    case 'deep': {
      const text = obj({ ...base(spec.k, NOW), extra: nest(spec.levels) });
      return 1 + spec.levels <= MAX_EVENT_DEPTH ? { text, verdict: 'accept' } : { text, verdict: 'reject', field: '(event)', received: `more than ${MAX_EVENT_DEPTH}` };
    }
    case 'odd-chars':
      return { text: JSON.stringify({ id, k: spec.k, ts: NOW, note: spec.note }), verdict: 'either', field: 'note', received: JSON.stringify(spec.note) };
    case 'non-object':
      return { text: spec.json, verdict: 'reject', field: '(event)', received: spec.json };
    case 'missing': {
      const members: Record<string, string> = base('a', NOW);
      delete members[spec.field];
      return { text: obj(members), verdict: 'reject', field: spec.field, received: 'undefined' };
    }
    case 'mistyped':
      return { text: obj({ ...base('a', NOW), [spec.field]: spec.json }), verdict: 'reject', field: spec.field, received: spec.json };
    case 'bad-time':
      return { text: obj({ ...base('b', NOW), ts: spec.json }), verdict: 'reject', field: 'timestamp', received: String(JSON.parse(spec.json)) };
  }
}

const key = fc.constantFrom(...KEYS);
const note = fc.string({ maxLength: 12 });
const eventSpec: fc.Arbitrary<EventSpec> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ t: fc.constant('valid' as const), k: key, ts: fc.integer({ min: -1000, max: NOW + MAX_FUTURE_MS }), note: fc.option(note, { nil: undefined }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('duplicate-key' as const), k: key, ts: fc.integer({ min: 0, max: NOW }), last: fc.constantFrom('valid' as const, 'invalid' as const) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('deep' as const), k: key, levels: fc.constantFrom(1, MAX_EVENT_DEPTH - 2, MAX_EVENT_DEPTH - 1, MAX_EVENT_DEPTH, MAX_EVENT_DEPTH + 1, 1000) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('odd-chars' as const), k: key, note: fc.constantFrom('nul\u0000', '\ud800', 'x\udfffy', '\u0000\ud83d', '\uffff', '\u0008') }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('non-object' as const), json: fc.constantFrom('42', '"str"', 'null', 'true', '[1,2]', '[]', '-0.5') }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('missing' as const), field: fc.constantFrom('id' as const, 'k' as const, 'ts' as const) }) },
  {
    weight: 2,
    arbitrary: fc.oneof(
      fc.record({ t: fc.constant('mistyped' as const), field: fc.constant('id' as const), json: fc.constantFrom('"7"', '1.5', 'null', '{}', 'false') }),
      fc.record({ t: fc.constant('mistyped' as const), field: fc.constant('k' as const), json: fc.constantFrom('3', 'null', '["a"]', 'true') }),
      fc.record({ t: fc.constant('mistyped' as const), field: fc.constant('ts' as const), json: fc.constantFrom('"soon"', 'true', 'null', '"1000"', '[1000]') }),
      fc.record({ t: fc.constant('mistyped' as const), field: fc.constant('note' as const), json: fc.constantFrom('5', 'null', '{"x":1}') }),
    ),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('bad-time' as const), json: fc.constantFrom('1.5', '1e300', String(NOW + MAX_FUTURE_MS + 1), '9007199254740993', '-1e20') }) },
);

export type Framing = 'json' | 'lines';
/** What is done to a well-formed body before sending: each has a known outcome. */
export type Mutation = { m: 'none' } | { m: 'bom' } | { m: 'truncate'; at: number } | { m: 'bad-utf8'; at: number } | { m: 'empty' } | { m: 'garbage'; at: number; char: string };
export type Header = { contentType: string | undefined; encoding: string | undefined };

export interface RequestSpec {
  readonly framing: Framing;
  readonly events: EventSpec[];
  readonly mutation: Mutation;
  readonly header: Header;
  /** Pad the first valid event's note so the body is this many bytes from the limit (around MAX_BODY). */
  readonly bodyAt?: -1 | 0 | 1;
}

const goodType = (f: Framing) =>
  f === 'json'
    ? fc.constantFrom('application/json', 'application/json; charset=utf-8', 'Application/JSON', 'application/json;charset="UTF8"')
    : fc.constantFrom('application/x-ndjson', 'application/jsonl', 'application/x-ndjson; charset=utf-8');
const badType = fc.constantFrom(undefined, 'text/plain', 'application/json; charset=iso-8859-1', 'application/x-www-form-urlencoded', 'multipart/form-data', 'json', '');
const goodEncoding = fc.constantFrom(undefined, 'identity', '');
const badEncoding = fc.constantFrom('gzip', 'br', 'deflate', 'gzip, identity', 'x-unknown');

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 10, arbitrary: fc.constant({ m: 'none' as const }) },
  { weight: 1, arbitrary: fc.constant({ m: 'bom' as const }) },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('truncate' as const), at: fc.double({ min: 0, max: 0.999, noNaN: true }) }) },
  { weight: 1, arbitrary: fc.record({ m: fc.constant('bad-utf8' as const), at: fc.double({ min: 0, max: 0.999, noNaN: true }) }) },
  { weight: 1, arbitrary: fc.constant({ m: 'empty' as const }) },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('garbage' as const), at: fc.double({ min: 0, max: 0.999, noNaN: true }), char: fc.constantFrom(',', '{', '}', ':', '"', '\\', 'x', '\u0000', '\n', ']') }) },
);

export const requestSpec: fc.Arbitrary<RequestSpec> = fc.constantFrom<Framing>('json', 'lines').chain((framing) =>
  fc.record({
    framing: fc.constant(framing),
    events: fc.oneof(
      { weight: 6, arbitrary: fc.array(eventSpec, { minLength: 1, maxLength: 8 }) },
      // At the event-count limit and one above it.
      { weight: 1, arbitrary: fc.constantFrom(MAX_EVENTS, MAX_EVENTS + 1).map((n) => Array.from({ length: n }, (_, i): EventSpec => ({ t: 'valid', k: KEYS[i % 3]!, ts: NOW }))) },
    ),
    mutation,
    header: fc.oneof(
      { weight: 8, arbitrary: fc.record({ contentType: goodType(framing), encoding: goodEncoding }) },
      { weight: 1, arbitrary: fc.record({ contentType: badType, encoding: goodEncoding }) },
      { weight: 1, arbitrary: fc.record({ contentType: goodType(framing), encoding: badEncoding }) },
      // The other framing's type: a JSON array read as one JSON line, or lines read as one JSON text.
      { weight: 1, arbitrary: fc.record({ contentType: goodType(framing === 'json' ? 'lines' : 'json'), encoding: goodEncoding }) },
    ),
    bodyAt: fc.oneof(
      { weight: 6, arbitrary: fc.constant(undefined) },
      { weight: 1, arbitrary: fc.constantFrom(-1 as const, 0 as const, 1 as const) },
    ),
  }),
);

/** A request ready to send, and what it must produce. */
export interface Built {
  readonly body: Uint8Array;
  readonly contentType: string | undefined;
  readonly encoding: string | undefined;
  readonly events: RenderedEvent[];
  /** The answer's status class when the body as sent decides it; undefined: decided per event. */
  readonly status?: 400 | 413 | 415;
  /** The events as the endpoint will parse them (for a 202: the index space of `rejected`), or undefined when it cannot parse. */
  readonly parsed?: unknown[];
}

const encoder = new TextEncoder();

/** Render `spec` with ids from `nextId` (each event its own, so every accepted record is distinct). */
export function build(spec: RequestSpec, nextId: () => number): Built {
  const events = spec.events.map((e) => render(e, nextId()));
  const join = (texts: string[]) => (spec.framing === 'json' ? `[${texts.join(',')}]` : texts.join('\n') + '\n');
  let text = join(events.map((e) => e.text));
  if (spec.bodyAt !== undefined) {
    const i = events.findIndex((e) => e.verdict === 'accept');
    const missing = MAX_BODY + spec.bodyAt - encoder.encode(text).length;
    if (i >= 0) {
      const value = JSON.parse(events[i]!.text) as Record<string, unknown>;
      delete value.note;
      // `,"note":"<pad>"` adds 10 bytes plus the pad.
      const pad = missing - (bytesOf(JSON.stringify(value)) - bytesOf(events[i]!.text)) - 10;
      if (pad >= 0) {
        value.note = 'p'.repeat(pad);
        events[i] = { ...events[i]!, text: JSON.stringify(value) };
        text = join(events.map((e) => e.text));
      }
    }
  }
  const bytes = mutate(encoder.encode(text), spec.mutation);
  const { contentType, encoding } = spec.header;
  const decoded = tryDecode(bytes);
  const framing = effectiveFraming(contentType);
  const parsed = decoded === undefined || framing === undefined ? 'malformed' : parseAs(decoded, framing);
  let status: Built['status'];
  if (framing === undefined || !['', 'identity', undefined].includes(encoding?.trim().toLowerCase())) status = 415;
  else if (bytes.length > MAX_BODY) status = 413;
  else if (parsed === 'malformed') status = 400;
  else if (parsed === 'too-many') status = 413;
  // The model knows each event's fate only for the body as generated, read as generated.
  const modelled = framing === spec.framing && (spec.mutation.m === 'none' || spec.mutation.m === 'bom');
  return { body: bytes, contentType, encoding, events, status, parsed: status === undefined && !modelled ? (parsed as unknown[]) : undefined };
}

const bytesOf = (s: string) => encoder.encode(s).length;

function mutate(bytes: Uint8Array, m: Mutation): Uint8Array {
  const at = 'at' in m ? Math.floor(m.at * bytes.length) : 0;
  switch (m.m) {
    case 'none':
      return bytes;
    case 'bom':
      return new Uint8Array([0xef, 0xbb, 0xbf, ...bytes]);
    case 'empty':
      return new Uint8Array();
    case 'truncate':
      return bytes.slice(0, at);
    case 'bad-utf8': {
      const copy = bytes.slice();
      copy[at] = 0xff;
      return copy;
    }
    case 'garbage':
      return new Uint8Array([...bytes.slice(0, at), ...encoder.encode(m.char), ...bytes.slice(at)]);
  }
}

function tryDecode(bytes: Uint8Array): string | undefined {
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  } catch {
    return undefined;
  }
}

function effectiveFraming(contentType: string | undefined): Framing | undefined {
  if (!contentType) return undefined;
  const [type, ...params] = contentType.split(';').map((s) => s.trim().toLowerCase());
  for (const p of params) {
    const [name, value] = p.split('=').map((s) => s.trim().replace(/^"|"$/g, ''));
    if (name === 'charset' && value !== 'utf-8' && value !== 'utf8') return undefined;
  }
  if (type === 'application/json') return 'json';
  if (type === 'application/x-ndjson' || type === 'application/jsonl') return 'lines';
  return undefined;
}

/** The events of a body as the contract reads it (a JSON array, or one value per non-blank line up to MAX_EVENTS). */
function parseAs(text: string, framing: Framing): unknown[] | 'malformed' | 'too-many' {
  try {
    if (framing === 'json') {
      const v: unknown = JSON.parse(text);
      if (!Array.isArray(v) || v.length === 0) return 'malformed';
      return v.length > MAX_EVENTS ? 'too-many' : v;
    }
    const out: unknown[] = [];
    for (const raw of text.split('\n')) {
      const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
      if (line.trim() === '') continue;
      if (out.length === MAX_EVENTS) return 'too-many';
      out.push(JSON.parse(line));
    }
    return out.length > 0 ? out : 'malformed';
  } catch {
    return 'malformed';
  }
}

/** An endpoint's answer, status and JSON body. */
export interface Answer {
  readonly status: number;
  readonly body: Record<string, any>;
}

/**
 * Checks one answer against the request; returns the events the endpoint accepted (to
 * find in the output exactly once). `extraStatuses` are further allowed answers (429 when
 * saturated, AWS's documented 503 outcome_unknown); `strictOdd`: NUL and lone surrogates
 * must be accepted.
 */
export function judge(built: Built, answer: Answer, options: { strictOdd?: boolean } = {}): unknown[] {
  const context = `status ${answer.status}, body ${JSON.stringify(answer.body).slice(0, 600)}`;
  const fail = (why: string): never => {
    throw new Error(`${why}; ${context}`);
  };
  if (answer.status >= 500) fail('a 5xx answer');
  if (typeof answer.body.message !== 'string' || answer.body.message === '') fail('an answer without a message');
  if (built.status !== undefined) {
    if (answer.status !== built.status) fail(`expected status ${built.status}`);
    return [];
  }
  const events = built.parsed ?? built.events.map((e) => JSON.parse(e.text) as unknown);
  const rejected = (answer.body.rejected ?? []) as { index: number; error: string }[];
  if (answer.status !== 202 && answer.status !== 400) fail('expected 202 or 400');
  if (!Array.isArray(rejected)) fail('rejected is not a list');
  const byIndex = new Map(rejected.map((r) => [r.index, r.error]));
  if (byIndex.size !== rejected.length) fail('an index rejected twice');
  for (const r of rejected) {
    if (!Number.isInteger(r.index) || r.index < 0 || r.index >= events.length) fail(`rejected index ${r.index} outside the request`);
    // A reason names the field, what was expected and what was received.
    if (!/^[^\s:]+: .*expected .+, received .+/s.test(r.error)) {
      fail(`reason without field, expected and received: ${JSON.stringify(r.error)}`);
    }
  }
  if (answer.status === 400 && byIndex.size !== events.length && answer.body.error === 'all_events_rejected') fail('all_events_rejected while some were not');
  if (answer.status === 202 && answer.body.accepted !== events.length - byIndex.size) fail(`accepted ${answer.body.accepted} of ${events.length} with ${byIndex.size} rejected`);
  if (built.parsed === undefined) {
    // Unmutated: the model knows each event's fate.
    built.events.forEach((e, i) => {
      const error = byIndex.get(i);
      if (e.verdict === 'accept' && error !== undefined) fail(`event ${i} ${e.text.slice(0, 200)} rejected: ${error}`);
      if (e.verdict === 'either' && options.strictOdd && error !== undefined) fail(`event ${i} ${JSON.stringify(e.text)} rejected: ${error}`);
      if (e.verdict === 'reject' || (e.verdict === 'either' && error !== undefined)) {
        if (error === undefined) return fail(`event ${i} ${e.text.slice(0, 200)} accepted; expected a rejection on ${e.field}`);
        if (!error.startsWith(`${e.field}: `) && !error.includes(`; ${e.field}: `)) fail(`event ${i} rejected without naming ${e.field}: ${error}`);
        if (!error.includes(`received ${e.received}`)) fail(`event ${i} rejected without the received value ${e.received}: ${error}`);
      }
    });
  }
  if (answer.status === 400) return [];
  return events.filter((_, i) => !byIndex.has(i));
}
