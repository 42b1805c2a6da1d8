/**
 * The embedded runtime's side of the HTTP ingestion endpoint (IngestTarget): which
 * streams it takes, validation, offering events to a source, and the pressure the
 * endpoint's bounds are checked against (queued records and lag, ingest-server.ts).
 */
import type { Clock } from '../api/types.ts';
import type { Envelope } from '../transport/envelope.ts';
import type { LogAppend } from './input-log.ts';
import { type KeyedOffer, KeyMemory } from './ingest-keys.ts';
import type { IngestPressure, OfferResult, Recalled } from './ingest-target.ts';
import type { FeedHost, SourceFeed } from './source-feed.ts';
import { IngestBuffer, toIngestRecord } from '../transport/sources.ts';
import { overShedBounds, type ShedDecision, shedEvents } from '../transport/load-shedding.ts';
import type { Slot } from './slot.ts';
import type { TimeSlicer } from './time-slice.ts';

/** What the ingestion side reads and calls of the runtime. */
export interface IngestView {
  readonly sources: readonly SourceFeed[];
  readonly hosts: readonly FeedHost[];
  readonly slots: readonly (readonly Slot[])[];
  readonly queueCapacity: number;
  readonly clock: Clock;
  readonly arrivals: Arrivals;
  readonly slicer: TimeSlicer | undefined;
  wake(): void;
}

/** Most queued envelopes looked at per partition for the oldest one the endpoint accepted. */
const SCAN = 16;

/** When the endpoint accepted the first event of each chunk it sent (kept only while the chunk is alive). */
export class Arrivals {
  private readonly at = new WeakMap<Envelope, number>();

  mark(env: Envelope, at: number): void {
    this.at.set(env, at);
  }

  /** The earliest arrival among the first envelopes of these queues (each FIFO: its first marked one is its oldest). */
  oldest(slots: readonly Slot[]): number | undefined {
    let oldest: number | undefined;
    for (const slot of slots) {
      const end = Math.min(slot.queue.length, slot.head + SCAN);
      for (let i = slot.head; i < end; i++) {
        const at = this.at.get(slot.queue[i]);
        if (at === undefined) continue;
        if (oldest === undefined || at < oldest) oldest = at;
        break;
      }
    }
    return oldest;
  }
}

export function ingestStreams(v: IngestView): string[] {
  return v.sources.filter((s) => s.reader instanceof IngestBuffer).map((s) => s.def.name);
}

export function validateIngest(v: IngestView, stream: string, event: unknown): string | undefined {
  const src = v.sources.find((s) => s.def.name === stream);
  if (!src) return `stream: expected one of ${ingestStreams(v).join(', ')}, received ${stream}`;
  const r = toIngestRecord(src.def, event, v.clock);
  return typeof r === 'string' ? r : undefined;
}

function ingestSource(v: IngestView, stream: string): SourceFeed | undefined {
  return v.sources.find((s) => s.def.name === stream && s.reader instanceof IngestBuffer);
}

/** Records accepted from this source and not processed by its stage yet (with what the stage queues from other sources). */
function queuedOf(v: IngestView, src: SourceFeed): number {
  const buffer = src.reader as IngestBuffer;
  return buffer.size + src.backlog + v.slots[src.stage].reduce((n, s) => n + s.queuedRecords, 0);
}

/** Per view: each ingestion source's Idempotency-Keys, read back from its log when first asked. */
const memories = new WeakMap<IngestView, Map<SourceFeed, KeyMemory>>();

function keysOf(v: IngestView, src: SourceFeed): KeyMemory {
  let all = memories.get(v);
  if (!all) memories.set(v, (all = new Map()));
  let m = all.get(src);
  if (!m) all.set(src, (m = new KeyMemory(src.def.name, src.logRecords ? src.log : undefined).load(v.clock.now())));
  return m;
}

/** What the sources remember of an Idempotency-Key (a key names one request, whatever its stream). */
export function recallIngestKey(v: IngestView, key: string): Recalled {
  const now = v.clock.now();
  for (const src of v.sources) {
    if (!(src.reader instanceof IngestBuffer)) continue;
    const e = keysOf(v, src).get(key, now);
    if (e) return { remembered: e, now };
  }
  return { remembered: undefined, now };
}

export function offerIngest(v: IngestView, stream: string, events: readonly unknown[], keyed?: KeyedOffer): OfferResult {
  const src = ingestSource(v, stream);
  if (!src) return { ok: false, retryAfterMs: 1000 };
  // The hard bound of the queues themselves (the endpoint's own bounds come first, ingest-server.ts).
  if (queuedOf(v, src) + events.length > v.queueCapacity * src.partitioner.partitions) return { ok: false, retryAfterMs: 1000 };
  src.arrived(events.length, v.clock.now());
  const keys = keyed && keysOf(v, src);
  if (!src.logRecords) {
    (src.reader as IngestBuffer).push(events);
    keys?.remember(keyed!);
    v.wake();
    return { ok: true };
  }
  // Only with nothing waiting for an fsync: the file rewritten then holds every line the log may keep.
  if (keys && src.settledLog) keys.compactIfStale();
  let line: LogAppend | undefined;
  const append = keys && ((records: readonly LogAppend[]) => (line = keys.append(keyed!, records)));
  // A logged source takes the events now, during a replay too: they are in the log before
  // the request is answered, and they go out only once the log's fsync has them (accepted means durable).
  const durable = src.accept(events, undefined, v.hosts[v.sources.indexOf(src)], false, append);
  // Remembered at once (a second request with the key waits for this one at the endpoint); forgotten if the fsync fails.
  if (keys) keys.remember(keyed!, line);
  if (keys && durable) durable.catch(() => keys.forget(keyed!.key, keyed!.fingerprint));
  v.wake();
  return durable ? { ok: true, durable } : { ok: true };
}

/** The stream's opt-in load shedding under `pressure`: undefined without a policy or under its bounds. `seen`: events its sampler saw while shedding. */
export function shedIngest(v: IngestView, stream: string, events: readonly unknown[], pressure: IngestPressure, seen: number): ShedDecision | undefined {
  const policy = ingestSource(v, stream)?.def.shed;
  if (!policy || !overShedBounds(policy, pressure)) return undefined;
  return shedEvents(policy, events, seen);
}

export function ingestPressure(v: IngestView, stream: string): IngestPressure | undefined {
  const src = ingestSource(v, stream);
  if (!src) return undefined;
  const now = v.clock.now();
  let oldest = v.arrivals.oldest(v.slots[src.stage]);
  const unread = src.oldestUnread();
  if (unread !== undefined && (oldest === undefined || unread < oldest)) oldest = unread;
  return { queuedRecords: queuedOf(v, src), lagMs: oldest === undefined ? 0 : Math.max(0, now - oldest), recordsPerSecond: v.slicer?.recordsPerSecond() };
}
