/**
 * What `sinkTo` and `print` return: a handle on the sink operator, as Flink's
 * DataStreamSink, to name it, give it a state identity (uid) and set its parallelism.
 */
import { JobDefinitionError } from '../errors.ts';
import { type LogicalNode, stateIdOf } from './logical.ts';

/** A uid is part of every state key of its operator: one line of printable text. */
export function checkUid(operator: string, uid: unknown): string {
  if (typeof uid !== 'string' || !/^[^\u0000-\u001f\u007f]{1,200}$/.test(uid)) {
    throw new JobDefinitionError(operator, 'uid() as 1 to 200 characters without control characters', JSON.stringify(uid) ?? String(uid));
  }
  return uid;
}

/** `T`: the type of the records the sink takes. */
export class DataStreamSink<T> {
  /** @internal */
  constructor(private readonly node: LogicalNode) {}

  /** The sink's name: what a runtime binds a sink to (`--sink`, EmbeddedOptions.sinks) and what reports show. */
  name(name: string): this {
    if (typeof name !== 'string' || name.length === 0) throw new JobDefinitionError(this.node.name, 'name() as a non-empty string', JSON.stringify(name) ?? String(name));
    this.node.name = name;
    this.node.userNamed = true;
    return this;
  }

  /**
   * The sink's identity in the plan, as an operator's uid (unique within the job, default
   * its name). A sink keeps no keyed state: its delivery sequence numbers and commit
   * state go by its name, so a renamed sink starts them afresh whatever its uid.
   */
  uid(uid: string): this {
    this.node.uid = checkUid(this.node.name, uid);
    return this;
  }

  /** Partitions of the sink; other than its input's, the sink runs as a stage of its own, fed round-robin. */
  parallelism(n: number): this {
    this.node.parallelism = n;
    return this;
  }

  getName(): string {
    return this.node.name;
  }

  getUid(): string {
    return stateIdOf(this.node);
  }

  /** Undefined: the job's default (or its input's, when chained). */
  getParallelism(): number | undefined {
    return this.node.parallelism;
  }
}
