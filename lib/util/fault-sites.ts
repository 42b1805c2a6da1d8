/**
 * The named fault sites: every point between two calls to an external service (a file of
 * the checkpoint directory, a sink, a source, an AWS API) where a process may die. This is
 * the one list: the embedded runtime calls `faultSite(name)` at each of its sites, the
 * local-AWS clients cross an AWS site before and after every SDK command it covers, and the
 * crash soak (bench/soak.ts) kills processes at them with SIGKILL. A test fails when a
 * handler sends an SDK command no site covers (test/soak/fault-sites.test.ts).
 *
 * A kill is armed per process (`armKill`, from SLUICE_KILL_AT in the CLI): `<point>#<n>`
 * kills the process at the nth crossing of that point, `any#<n>` at the nth crossing of any.
 */

export type FaultRuntime = 'embedded' | 'aws';

export interface FaultSite {
  readonly name: string;
  readonly runtime: FaultRuntime;
  /** Which two external calls it sits between (for the report and the reader). */
  readonly between: string;
  /** AWS sites: the SDK commands (without the `Command` suffix) whose calls it surrounds. */
  readonly commands?: readonly string[];
}

export const FAULT_SITES: readonly FaultSite[] = [
  // The embedded runtime, one batch of one partition.
  { name: 'source.read', runtime: 'embedded', between: 'a source chunk read and its processing' },
  { name: 'batch.commit.before', runtime: 'embedded', between: 'a batch processed and its commit (state, progress, outbox)' },
  { name: 'batch.commit.after', runtime: 'embedded', between: 'the commit and the outbox delivery' },
  { name: 'sink.write', runtime: 'embedded', between: 'two sink deliveries of one outbox' },
  { name: 'outbox.delivered', runtime: 'embedded', between: 'the outbox delivered and cleared' },
  { name: 'outbox.cleared', runtime: 'embedded', between: 'the outbox cleared and the input acknowledged' },
  { name: 'input-log.append', runtime: 'embedded', between: 'a chunk stamped and written to the input log' },
  { name: 'dead-letter.append', runtime: 'embedded', between: 'a dead letter parked and appended to its file' },
  // The embedded checkpoint coordinator and storage.
  { name: 'coordinator.record', runtime: 'embedded', between: 'a coordinator step decided and its record written' },
  { name: 'coordinator.inject', runtime: 'embedded', between: 'the epoch opened and its barriers injected' },
  { name: 'snapshot.write', runtime: 'embedded', between: 'a barrier aligned and its snapshot written' },
  { name: 'coordinator.manifest', runtime: 'embedded', between: 'the last ack and the manifest written' },
  { name: 'coordinator.stats', runtime: 'embedded', between: 'the manifest and the checkpoint statistics written' },
  { name: 'sink.prepare', runtime: 'embedded', between: 'the statistics written and the transactional sinks prepared' },
  { name: 'coordinator.pointer', runtime: 'embedded', between: 'the sinks prepared and the commit pointer written' },
  { name: 'sink.commit.before', runtime: 'embedded', between: 'the commit pointer written and the transactional sinks committed' },
  { name: 'sink.commit.after', runtime: 'embedded', between: 'the sinks committed and the logs truncated' },
  { name: 'coordinator.truncate', runtime: 'embedded', between: 'the checkpoint committed and the input logs truncated' },
  { name: 'blob.delete', runtime: 'embedded', between: 'snapshots no checkpoint needs and their deletion' },
  // The AWS path (handlers, event source mapping, coordinator steps), by SDK command.
  { name: 'aws.commit', runtime: 'aws', between: 'a batch processed and its transaction; the transaction and the outbox delivery', commands: ['TransactWriteItems'] },
  { name: 'aws.outbox.deliver', runtime: 'aws', between: 'the commit and each outbox send', commands: ['SendMessageBatch', 'SendMessage'] },
  { name: 'aws.outbox.clear', runtime: 'aws', between: 'the outbox delivered and cleared', commands: ['BatchWriteItem'] },
  { name: 'aws.queue.receive', runtime: 'aws', between: 'two receives of the event source mapping', commands: ['ReceiveMessage'] },
  { name: 'aws.queue.delete', runtime: 'aws', between: 'a batch answered and its messages deleted or released', commands: ['DeleteMessage', 'DeleteMessageBatch', 'ChangeMessageVisibility', 'ChangeMessageVisibilityBatch'] },
  { name: 'aws.state.read', runtime: 'aws', between: 'a partition opened and its state, progress and outbox read', commands: ['GetItem', 'BatchGetItem', 'Query', 'Scan'] },
  { name: 'aws.control.write', runtime: 'aws', between: 'a coordinator step or ack decided and its control item written', commands: ['PutItem', 'UpdateItem', 'DeleteItem'] },
  { name: 'aws.snapshot.write', runtime: 'aws', between: 'a barrier aligned and its snapshot, manifest, log segment or sink file written', commands: ['PutObject'] },
  { name: 'aws.blob.read', runtime: 'aws', between: 'a restore or replay and the objects it reads', commands: ['GetObject', 'HeadObject', 'ListObjectsV2'] },
  { name: 'aws.blob.delete', runtime: 'aws', between: 'objects no checkpoint needs and their deletion', commands: ['DeleteObject', 'DeleteObjects'] },
  {
    name: 'aws.setup',
    runtime: 'aws',
    between: 'the run started and its tables, queues and buckets found or made',
    commands: ['CreateTable', 'DescribeTable', 'UpdateTimeToLive', 'CreateQueue', 'GetQueueUrl', 'GetQueueAttributes', 'SetQueueAttributes', 'ListQueues', 'PurgeQueue', 'CreateBucket', 'HeadBucket', 'ListTables'],
  },
];

const BY_NAME = new Map(FAULT_SITES.map((s) => [s.name, s]));
const BY_COMMAND = new Map(FAULT_SITES.flatMap((s) => (s.commands ?? []).map((c) => [c, s] as const)));

/** The site that covers an SDK command (`TransactWriteItemsCommand` or `TransactWriteItems`), or undefined. */
export function siteOfCommand(command: string): FaultSite | undefined {
  return BY_COMMAND.get(command.replace(/Command$/, ''));
}

/** Every point a kill may name: each embedded site, and each AWS site before and after its call. */
export function faultPoints(runtime?: FaultRuntime): string[] {
  return FAULT_SITES.filter((s) => runtime === undefined || s.runtime === runtime).flatMap((s) => (s.runtime === 'aws' ? [`${s.name}:before`, `${s.name}:after`] : [s.name]));
}

export interface KillSpec {
  /** A point of faultPoints(), or 'any'. */
  readonly point: string;
  /** Kill at this crossing (1 = the first). */
  readonly nth: number;
}

/** Parses `<point>#<n>`; the error names what was expected and what was received. */
export function parseKillSpec(raw: string, what = 'SLUICE_KILL_AT'): KillSpec {
  const m = /^([a-z0-9.:-]+)#([1-9]\d*)$/.exec(raw.trim());
  const points = faultPoints();
  if (!m || (m[1] !== 'any' && !points.includes(m[1]))) {
    throw new Error(`${what}: expected <point>#<n> (n >= 1), point "any" or one of ${points.join(', ')}; received ${JSON.stringify(raw)}`);
  }
  return { point: m[1], nth: Number(m[2]) };
}

let armed: { spec: KillSpec; seen: number; kill: (point: string) => void } | undefined;
const crossings = new Map<string, number>();
let counting = false;

/** Kill this process at the spec's crossing. `kill` defaults to a real SIGKILL of this process. */
export function armKill(spec: KillSpec, kill: (point: string) => void = () => process.kill(process.pid, 'SIGKILL')): void {
  armed = { spec, seen: 0, kill };
}

export function disarmKill(): void {
  armed = undefined;
}

/** Tests: count every crossing by point (faultCrossings()), off by default. */
export function countCrossings(on: boolean): void {
  counting = on;
  crossings.clear();
}

export function faultCrossings(): ReadonlyMap<string, number> {
  return crossings;
}

/** Crossed at a named point; a no-op unless a kill is armed or crossings are counted. */
export function faultSite(point: string): void {
  if (counting) crossings.set(point, (crossings.get(point) ?? 0) + 1);
  const a = armed;
  if (a === undefined || (a.spec.point !== 'any' && a.spec.point !== point)) return;
  if (++a.seen === a.spec.nth) a.kill(point);
}

/** A named site exists (the runtime's calls are checked against the list in tests). */
export function isFaultSite(name: string): boolean {
  return BY_NAME.has(name);
}
