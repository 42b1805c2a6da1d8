/**
 * A columnar envelope's records into the node its edge feeds, without a record object
 * per record (lib/transport/envelope.ts `RecordColumns`):
 * - a source node: the values and timestamps straight into what it emits to (its
 *   pass-through inlined);
 * - a keyed node fed by a hash edge: the current key from the key, key string and key
 *   group the sender computed (NodeContext.setRoutedKey), then the operator with one
 *   record object per envelope, re-pointed at each record. No operator keeps the record
 *   it is given (lib/operators keep values), so reusing it is safe;
 * - a stateless node: its fused entry with (value, timestamp).
 *
 * Failure attribution is that of the record path: the batch position's index is the
 * record's, a count per record entered, and a throw that is not already a UserCodeError
 * becomes the node's RecordFailedError with the record's value and location.
 */
import type { StreamRecord } from '../api/types.ts';
import { UserCodeError } from '../errors.ts';
import { KEYED_KINDS } from '../api/logical.ts';
import type { RecordColumns, SourceStamp } from '../transport/envelope.ts';
import type { NodeRuntime } from './context.ts';
import { RecordFailedError } from './failures.ts';
import type { BatchPosition } from './position.ts';

/**
 * Apply the columns to `target` (its input `input`). False: this target needs the
 * record path (a keyed node without key columns, or a node with neither a fused entry
 * nor a key), and nothing was applied.
 */
export function applyColumns(columns: RecordColumns, target: NodeRuntime, input: number, at: BatchPosition): boolean {
  const kind = target.node.spec.kind;
  if (kind === 'source') applySource(columns, target, at);
  else if (KEYED_KINDS.has(kind)) {
    if (!columns.keys) return false;
    applyKeyed(columns, target, input, at);
  } else if (target.entry) applyStateless(columns, target.entry, at);
  else return false;
  return true;
}

/** The source node's pass-through inlined: one try/catch and one count for the envelope. */
function applySource(columns: RecordColumns, source: NodeRuntime, at: BatchPosition): void {
  const { values, timestamps } = columns;
  const n = values.length;
  const emit = source.emitMain;
  let i = 0;
  try {
    for (; i < n; i++) {
      at.index = i;
      emit(values[i], timestamps[i]);
    }
  } catch (e) {
    source.recordsIn += i + 1;
    throw e instanceof UserCodeError ? e : new RecordFailedError(source.node.name, values[i], e, at.location());
  }
  source.recordsIn += n;
}

/**
 * A source chunk stamped in the same pass as its events go through the chain (SourceStamp);
 * attribution as in applySource. A record that throws leaves the chunk stamped whole (its
 * rejections reported, its records counted once), and the partition's retry applies its
 * columns; what the source's own accounting throws goes through as it is.
 */
export function applySourceStamp(stamp: SourceStamp, source: NodeRuntime, at: BatchPosition): RecordColumns {
  let failure: { error: unknown } | undefined;
  const columns = stamp.stamp(source.emitMain, at, (error) => (failure = { error }));
  if (failure) {
    const e = failure.error;
    source.recordsIn += at.index + 1;
    throw e instanceof UserCodeError ? e : new RecordFailedError(source.node.name, columns.values[at.index], e, at.location());
  }
  source.recordsIn += columns.values.length;
  return columns;
}

function applyKeyed(columns: RecordColumns, target: NodeRuntime, input: number, at: BatchPosition): void {
  const { values, timestamps } = columns;
  const keys = columns.keys!;
  const keyStrings = columns.keyStrings!;
  const keyGroups = columns.keyGroups!;
  const n = values.length;
  const ctx = target.ctx;
  const op = target.op;
  const rec: StreamRecord = { value: undefined, timestamp: 0, key: undefined };
  let i = 0;
  try {
    for (; i < n; i++) {
      at.index = i;
      const key = keys[i];
      ctx.setRoutedKey(key, keyStrings[i], keyGroups[i]);
      rec.value = values[i];
      rec.timestamp = timestamps[i];
      rec.key = key;
      op.processElement(rec, input);
    }
  } catch (e) {
    target.recordsIn += i + 1;
    throw e instanceof UserCodeError ? e : new RecordFailedError(target.node.name, values[i], e, at.location());
  }
  target.recordsIn += n;
}

/** The fused entry counts and attributes each record itself. */
function applyStateless(columns: RecordColumns, entry: (value: unknown, timestamp: number) => void, at: BatchPosition): void {
  const { values, timestamps } = columns;
  const n = values.length;
  for (let i = 0; i < n; i++) {
    at.index = i;
    entry(values[i], timestamps[i]);
  }
}
