/** The fluent, typed dataflow API: Job -> DataStream -> KeyedStream -> windows, joins, sinks. */
import { JobDefinitionError } from '../errors.ts';
import { JobGraph, MAIN_PORT, type JobOptions, type ParallelismOverride, type LogicalInput, type LogicalNode, type NodeSpec, type WindowFunctionSpec } from './logical.ts';
import type {
  AggregateFunction,
  CoGroupFunction,
  IntervalJoinFunction,
  JoinFunction,
  KeyedCoProcessFunction,
  KeyedProcessFunction,
  ProcessWindowFunction,
  ReduceFunction,
  WindowResultFunction,
} from './functions.ts';
import { Sinks, type Sink } from './sinks.ts';
import { checkUid, DataStreamSink } from './stream-sink.ts';
import type { IdleAdvance, LoadShedding, SourceBinding, SourceOptions } from './sources.ts';
import type { StateSpec, UntypedStateHandles } from './state.ts';
import { type Key, type KeySelector, OutputTag, WatermarkStrategies } from './types.ts';
import type { WindowAssigner } from './windows.ts';

export class Job {
  /** The logical graph the API builds (compiled by the runtimes). @internal */
  readonly graph: JobGraph;

  constructor(name: string, options: JobOptions = {}) {
    if (!/^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/.test(name)) {
      throw new JobDefinitionError('job', 'a name of letters, digits, "-" and "_" (at most 63, starting with a letter or digit)', JSON.stringify(name));
    }
    this.graph = new JobGraph(name, options);
  }

  get name(): string {
    return this.graph.name;
  }

  /**
   * This job at other parallelisms: `default` for every operator without its own, and per
   * operator by name. Its state and key groups stay, so a savepoint of this job restores
   * into the copy with its state moved by key group (rescaling), within maxParallelism.
   */
  withParallelism(o: ParallelismOverride): Job {
    const job = Object.create(Job.prototype) as { graph: JobGraph };
    job.graph = this.graph.withParallelism(o);
    return job as Job;
  }

  /** A named ingestion stream (HTTP endpoint locally, the ingest function on AWS). */
  ingest<T>(name: string, options: SourceOptions<T> = {}): DataStream<T> {
    return this.source(name, { kind: 'ingest' }, options);
  }

  /** A bounded JSON-lines file. */
  fromFile<T>(name: string, path: string, options: SourceOptions<T> = {}): DataStream<T> {
    // Untyped callers (a job run by tsx is not type-checked) may pass the options as the path.
    if (typeof path !== 'string') throw new JobDefinitionError(name, 'fromFile(name, path, options): a file path string as the second argument', path === null ? 'null' : typeof path === 'object' ? 'an object' : typeof path);
    return this.source(name, { kind: 'file', path }, options);
  }

  /** Event n is generate(n), for n < count (unbounded without count), optionally paced; generateBatch(start, end): several at once (see SourceBinding). */
  fromGenerator<T>(
    name: string,
    generator: { generate: (n: number) => T; generateBatch?: (start: number, end: number) => T[]; count?: number; ratePerSec?: number },
    options: SourceOptions<T> = {},
  ): DataStream<T> {
    return this.source(name, { kind: 'generator', ...generator }, options);
  }

  /** A bounded list of items (tests and examples). */
  fromItems<T>(name: string, items: readonly T[], options: SourceOptions<T> = {}): DataStream<T> {
    return this.source(name, { kind: 'items', items }, options);
  }

  private source<T>(name: string, binding: SourceBinding<T>, options: SourceOptions<T>): DataStream<T> {
    const node = this.graph.addNode(
      {
        kind: 'source',
        source: {
          name,
          binding,
          timestamp: options.timestamp,
          watermark: options.watermark ?? WatermarkStrategies.boundedOutOfOrderness(0),
          schema: options.schema,
          maxFutureMs: checkMaxFutureMs(name, binding.kind, options.maxFutureMs),
          idleAdvance: checkIdleAdvance(name, binding.kind, options.idleAdvance),
          shed: checkShedding(name, binding.kind, options.shed),
        },
      },
      [],
      name,
    );
    if (options.parallelism !== undefined) node.parallelism = options.parallelism;
    return new DataStream<T>(this, node, MAIN_PORT);
  }
}

/** Checked when events arrive, so only an ingestion stream can have it. */
function checkMaxFutureMs(source: string, kind: string, ms: number | undefined): number | undefined {
  if (ms === undefined) return undefined;
  if (kind !== 'ingest') throw new JobDefinitionError(source, 'maxFutureMs only on an ingestion stream (job.ingest)', `a ${kind} source`);
  if (!Number.isSafeInteger(ms) || ms < 0) throw new JobDefinitionError(source, 'maxFutureMs as a non-negative integer of milliseconds', String(ms));
  return ms;
}

/** Shedding acts where events arrive, so only an ingestion stream can have it. */
function checkShedding<T>(source: string, kind: string, shed: LoadShedding<T> | undefined): LoadShedding<T> | undefined {
  if (shed === undefined) return undefined;
  if (kind !== 'ingest') throw new JobDefinitionError(source, 'shed only on an ingestion stream (job.ingest)', `a ${kind} source`);
  const bound = (v: unknown) => v === undefined || (typeof v === 'number' && Number.isSafeInteger(v) && v > 0);
  if (!bound(shed.whenQueued) || !bound(shed.whenLagMs) || (shed.whenQueued === undefined && shed.whenLagMs === undefined)) {
    throw new JobDefinitionError(source, 'shed.whenQueued (records) and/or shed.whenLagMs (ms), positive integers', JSON.stringify({ whenQueued: shed.whenQueued, whenLagMs: shed.whenLagMs }));
  }
  const d = shed.drop as unknown;
  const ok =
    d === 'newest' ||
    (typeof d === 'object' && d !== null && 'keep' in d && typeof d.keep === 'number' && d.keep > 0 && d.keep < 1) ||
    (typeof d === 'object' && d !== null && 'priority' in d && typeof d.priority === 'function' && 'keepAtLeast' in d && Number.isFinite(d.keepAtLeast));
  if (!ok) throw new JobDefinitionError(source, "shed.drop as 'newest', { keep: r } with 0 < r < 1, or { priority: (event) => number, keepAtLeast: n }", JSON.stringify(d) ?? String(d));
  return shed;
}

function checkIdleAdvance(source: string, kind: string, advance: unknown): IdleAdvance {
  if (advance === undefined) return kind === 'ingest' ? 'processing-time' : 'hold';
  if (advance !== 'processing-time' && advance !== 'hold') throw new JobDefinitionError(source, "idleAdvance as 'processing-time' or 'hold'", JSON.stringify(advance) ?? String(advance));
  return advance;
}

/** Shared by the stream classes: adds a node downstream of this stream. */
abstract class StreamBase {
  /** Streams are made by a Job and by the operators of other streams. @internal */
  constructor(
    readonly job: Job,
    /** The logical node that produces this stream. @internal */
    protected readonly node: LogicalNode,
    protected readonly port: string,
  ) {}

  /** The logical input a downstream operator reads this stream through. @internal */
  protected input(partitioning: LogicalInput['partitioning'] = { kind: 'forward' }): LogicalInput {
    return { node: this.node.id, port: this.port, partitioning };
  }

  /** Adds an operator downstream of this stream. @internal */
  protected add<O>(spec: NodeSpec, inputs: LogicalInput[]): DataStream<O> {
    return new DataStream<O>(this.job, this.job.graph.addNode(spec, inputs), MAIN_PORT);
  }
}

export class DataStream<T> extends StreamBase {
  /** Name the operator that produces this stream (its state is stored under this name unless it has a uid). */
  name(name: string): this {
    if (this.port !== MAIN_PORT) throw new JobDefinitionError(this.node.name, 'name() on an operator, not on a side output', `side output "${this.port}"`);
    this.node.name = name;
    this.node.userNamed = true;
    return this;
  }

  /**
   * The state identity of the operator that produces this stream (Flink's uid): keyed
   * state and timers are stored and restored from savepoints under it, so the operator
   * can be renamed without losing them. Default: its name. Unique within the job.
   */
  uid(uid: string): this {
    if (this.port !== MAIN_PORT) throw new JobDefinitionError(this.node.name, 'uid() on an operator, not on a side output', `side output "${this.port}"`);
    this.node.uid = checkUid(this.node.name, uid);
    return this;
  }

  /** Partitions of the operator that produces this stream (its whole stage, when it heads one). */
  parallelism(n: number): this {
    this.node.parallelism = n;
    return this;
  }

  map<O>(fn: (value: T) => O): DataStream<O> {
    return this.add({ kind: 'map', fn }, [this.input()]);
  }

  filter(fn: (value: T) => boolean): DataStream<T> {
    return this.add({ kind: 'filter', fn }, [this.input()]);
  }

  /** Narrowing filter: the output type is the guarded type. */
  filterAs<S extends T>(fn: (value: T) => value is S): DataStream<S> {
    return this.add({ kind: 'filter', fn }, [this.input()]);
  }

  flatMap<O>(fn: (value: T) => Iterable<O>): DataStream<O> {
    return this.add({ kind: 'flatMap', fn }, [this.input()]);
  }

  union(...others: DataStream<T>[]): DataStream<T> {
    for (const o of others) {
      if (o.job !== this.job) throw new JobDefinitionError('union', 'streams of the same job', 'a stream of another job');
    }
    return this.add({ kind: 'union' }, [this.input(), ...others.map((o) => o.input())]);
  }

  /** Partition by key: same key, same partition, and keyed state and timers become available. */
  keyBy<K extends Key>(key: KeySelector<T, K>): KeyedStream<T, K> {
    return new KeyedStream<T, K>(this.job, this.node, this.port, key);
  }

  /**
   * Windows need a keyed stream. Present so that a JavaScript caller gets a clear
   * error; in TypeScript, call keyBy first (keyBy(() => 'all') for one global window).
   */
  window(_assigner: WindowAssigner): never {
    throw new JobDefinitionError(
      `window after "${this.node.name}"`,
      'a keyed stream: call keyBy(...) first, or keyBy(() => "all") for one explicit global window',
      'an unkeyed stream',
    );
  }

  /** The records an operator emitted to a side output (for example a window's late records). */
  getSideOutput<X>(tag: OutputTag<X>): DataStream<X> {
    return new DataStream<X>(this.job, this.node, tag.id);
  }

  /** Write the stream to a sink; the handle names it, sets its uid and parallelism. */
  sinkTo(sink: Sink<T>, name?: string): DataStreamSink<T> {
    const node = this.job.graph.addNode({ kind: 'sink', sink }, [this.input()], name);
    if (!name) node.name = `sink-${node.id}`;
    return new DataStreamSink<T>(node);
  }

  print(format?: (record: T) => string): DataStreamSink<T> {
    return this.sinkTo(Sinks.stdout(format));
  }
}

export class KeyedStream<T, K extends Key> extends StreamBase {
  /** Made by DataStream.keyBy. @internal */
  constructor(
    job: Job,
    node: LogicalNode,
    port: string,
    readonly key: KeySelector<T, K>,
  ) {
    super(job, node, port);
  }

  /**
   * The logical input a keyed operator reads this stream through.
   * @internal
   */
  keyedInput(): LogicalInput {
    return this.input({ kind: 'hash', key: this.key });
  }

  /**
   * A keyed process function: per record (and per timer) of a key, with that key's
   * declared state, timers and side outputs.
   *
   * Leave out the type arguments and both the output type (from what the function's
   * `emit` accepts: `unknown` unless annotated) and the state spec are inferred; give
   * both (`process<Out, typeof state>`) to have both checked; give the output type alone
   * (`process<Out>`) and records are checked against `Out` while `ctx.state` holds
   * {@link UntypedStateHandles}, since TypeScript infers either all of a call's type
   * arguments or none.
   */
  process<O, S extends StateSpec>(fn: KeyedProcessFunction<K, T, O, S>): DataStream<O>;
  process<O>(fn: KeyedProcessFunction<K, T, O, StateSpec>): DataStream<O>;
  process<O>(fn: KeyedProcessFunction<K, T, O, StateSpec>): DataStream<O> {
    return this.add({ kind: 'keyedProcess', fn }, [this.keyedInput()]);
  }

  window(assigner: WindowAssigner): WindowedStream<T, K> {
    return new WindowedStream<T, K>(this, assigner);
  }

  /** Windowed inner join with another keyed stream on equal keys (both sides in the same window). */
  join<R>(other: KeyedStream<R, K>): { window(assigner: WindowAssigner): JoinedWindow<T, R, K> } {
    return { window: (assigner) => new JoinedWindow<T, R, K>(this, other, assigner) };
  }

  /** Interval join: each left record meets the right records with lower <= right.t - left.t <= upper. */
  intervalJoin<R>(other: KeyedStream<R, K>): { between(lowerMs: number, upperMs: number): IntervalJoined<T, R, K> } {
    return {
      between: (lowerMs, upperMs) => {
        if (!(lowerMs <= upperMs)) throw new JobDefinitionError('intervalJoin', 'lowerMs <= upperMs', `${lowerMs} > ${upperMs}`);
        return new IntervalJoined<T, R, K>(this, other, lowerMs, upperMs);
      },
    };
  }

  /** Two keyed streams into one keyed function with shared state and timers. */
  connect<R>(other: KeyedStream<R, K>): ConnectedStreams<T, R, K> {
    return new ConnectedStreams<T, R, K>(this, other);
  }

  /** @internal */
  addNode<O>(spec: NodeSpec, inputs: LogicalInput[]): DataStream<O> {
    return this.add<O>(spec, inputs);
  }
}

export class WindowedStream<T, K extends Key> {
  private latenessMs = 0;
  private lateTag?: OutputTag<T>;
  private combine = true;

  constructor(
    private readonly keyed: KeyedStream<T, K>,
    private readonly assigner: WindowAssigner,
  ) {}

  /** Keep window state this long after the window fired; late records fire it again. Default 0. */
  allowedLateness(ms: number): this {
    if (!Number.isSafeInteger(ms) || ms < 0) throw new JobDefinitionError('allowedLateness', 'a non-negative integer of milliseconds', String(ms));
    this.latenessMs = ms;
    return this;
  }

  /** Records too late for every window they belong to go to this side output instead of being dropped. */
  sideOutputLateData(tag: OutputTag<T>): this {
    this.lateTag = tag;
    return this;
  }

  /**
   * Pre-aggregation before the shuffle (default on): records of one key and pane are
   * folded into one partial result on the sending side (add(), or the reduce function)
   * and merged into the window (merge(), or the reduce function) instead of each record
   * crossing the shuffle. It applies to tumbling and sliding windows of an aggregate with
   * merge() or of a reduce, without allowed lateness or a late side output; the results
   * are the same when merge(a, add(...)) equals adding the records to a (an associative
   * reduce). Pass false for functions that do not meet that contract.
   */
  preAggregate(enabled: boolean): this {
    if (typeof enabled !== 'boolean') throw new JobDefinitionError('preAggregate', 'true or false', String(enabled));
    this.combine = enabled;
    return this;
  }

  aggregate<A, R>(agg: AggregateFunction<T, A, R>): DataStream<R>;
  aggregate<A, R, O>(agg: AggregateFunction<T, A, R>, project: WindowResultFunction<K, R, O>): DataStream<O>;
  aggregate<A, R, O>(agg: AggregateFunction<T, A, R>, project?: WindowResultFunction<K, R, O>): DataStream<O | R> {
    if (this.assigner.kind === 'session' && !agg.merge) {
      throw new JobDefinitionError('window aggregate', 'an AggregateFunction with merge() for session windows', 'no merge()');
    }
    return this.build({ kind: 'aggregate', agg, project });
  }

  reduce(reduce: ReduceFunction<T>): DataStream<T>;
  reduce<O>(reduce: ReduceFunction<T>, project: WindowResultFunction<K, T, O>): DataStream<O>;
  reduce<O>(reduce: ReduceFunction<T>, project?: WindowResultFunction<K, T, O>): DataStream<O | T> {
    return this.build({ kind: 'reduce', reduce, project });
  }

  process<O>(process: ProcessWindowFunction<K, T, O>): DataStream<O> {
    return this.build({ kind: 'process', process });
  }

  private build<O>(fn: WindowFunctionSpec): DataStream<O> {
    return this.keyed.addNode<O>(
      { kind: 'window', assigner: this.assigner, allowedLatenessMs: this.latenessMs, lateTag: this.lateTag?.id, fn, ...(this.combine ? {} : { preAggregate: false }) },
      [this.keyed.keyedInput()],
    );
  }
}

export interface CoGroupOptions {
  /**
   * Call the function only for windows with records on both sides, as an inner join
   * (a one-sided window's records are purged without a call). Default false: every
   * window with a record on either side, the other side possibly empty.
   */
  readonly inner?: boolean;
}

export class JoinedWindow<L, R, K extends Key> {
  constructor(
    private readonly left: KeyedStream<L, K>,
    private readonly right: KeyedStream<R, K>,
    private readonly assigner: WindowAssigner,
  ) {}

  /** One output per matching (left, right) pair in the same window. */
  apply<O>(join: JoinFunction<L, R, O>): DataStream<O> {
    return this.left.addNode<O>({ kind: 'windowJoin', assigner: this.assigner, fn: { kind: 'pairs', join } }, [
      this.left.keyedInput(),
      this.right.keyedInput(),
    ]);
  }

  /**
   * All left and right records of a key's window at once: by default for every window
   * with a record on either side (an empty side included, as an outer join); with
   * `{ inner: true }` only for windows with records on both sides (as an inner join).
   */
  coGroup<O>(coGroup: CoGroupFunction<K, L, R, O>, options: CoGroupOptions = {}): DataStream<O> {
    const unknown = Object.keys(options).filter((k) => k !== 'inner');
    if (unknown.length > 0) throw new JobDefinitionError('coGroup', 'options with at most "inner"', `option ${unknown.map((k) => JSON.stringify(k)).join(', ')}`);
    const inner = options.inner ?? false;
    if (typeof inner !== 'boolean') throw new JobDefinitionError('coGroup', 'options.inner: true or false', JSON.stringify(inner));
    return this.left.addNode<O>({ kind: 'windowJoin', assigner: this.assigner, fn: { kind: 'coGroup', coGroup, inner } }, [
      this.left.keyedInput(),
      this.right.keyedInput(),
    ]);
  }
}

export class IntervalJoined<L, R, K extends Key> {
  constructor(
    private readonly left: KeyedStream<L, K>,
    private readonly right: KeyedStream<R, K>,
    private readonly lowerMs: number,
    private readonly upperMs: number,
  ) {}

  process<O>(fn: IntervalJoinFunction<K, L, R, O>): DataStream<O> {
    return this.left.addNode<O>({ kind: 'intervalJoin', lowerMs: this.lowerMs, upperMs: this.upperMs, fn }, [
      this.left.keyedInput(),
      this.right.keyedInput(),
    ]);
  }
}

export class ConnectedStreams<A, B, K extends Key> {
  constructor(
    private readonly first: KeyedStream<A, K>,
    private readonly second: KeyedStream<B, K>,
  ) {}

  /**
   * A keyed function over two inputs sharing their keys' state and timers. Type
   * arguments as for {@link KeyedStream.process}: none (inferred), both, or the output
   * type alone (state handles then untyped).
   */
  process<O, S extends StateSpec>(fn: KeyedCoProcessFunction<K, A, B, O, S>): DataStream<O>;
  process<O>(fn: KeyedCoProcessFunction<K, A, B, O, StateSpec>): DataStream<O>;
  process<O>(fn: KeyedCoProcessFunction<K, A, B, O, StateSpec>): DataStream<O> {
    return this.first.addNode<O>({ kind: 'coProcess', fn }, [this.first.keyedInput(), this.second.keyedInput()]);
  }
}
