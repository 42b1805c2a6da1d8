/**
 * Where a partition is while it applies a batch: the input record being applied (its
 * channel, envelope and index, as fields rather than an object per record) or the
 * timer or watermark callback running, so that a throw can name it; and the failures a
 * retry parks as dead letters instead of running them again.
 */
import { keyFromString, type StreamRecord } from '../api/types.ts';
import { UserCodeError } from '../errors.ts';
import type { TimerEntry } from '../state/backend.ts';
import type { DeadLetter, Envelope } from '../transport/envelope.ts';
import type { NodeRuntime } from './context.ts';
import { type CallbackLocation, type FailureLocation, locationId, type ParkedFailure, RecordFailedError, type RecordLocation } from './failures.ts';

export class BatchPosition {
  /** The input record being applied (channel undefined: none). */
  channel: string | undefined;
  seq = 0;
  index = 0;
  offset: string | undefined;
  /** The envelope being applied, whose watermark may fire timers. */
  applying: Envelope | undefined;
  /** The callback running (timer, or watermark). */
  private readonly firing: { node: NodeRuntime | undefined; timer: TimerEntry | undefined; watermark: number } = { node: undefined, timer: undefined, watermark: 0 };
  /** Failures (by locationId) to park instead of run, in this batch. */
  skip: ReadonlyMap<string, ParkedFailure> | undefined;
  /** Location ids parked in this batch. */
  parked: string[] = [];
  /** Dead letters to commit with the next commit. */
  deadLetters: DeadLetter[] = [];

  /** Start a batch (`skip`: what a retry parks). */
  begin(skip: ReadonlyMap<string, ParkedFailure> | undefined): void {
    this.skip = skip;
    this.parked = [];
  }

  /** End a batch: the location ids it parked. */
  end(): string[] {
    this.skip = undefined;
    return this.parked;
  }

  /** Records of `env` follow. */
  enter(env: Envelope): void {
    this.channel = env.channel;
    this.seq = env.seq;
    this.offset = env.offset;
  }

  leave(): void {
    this.channel = undefined;
  }

  /** With a skip list: parks the record at the current index if a retry asked for it (true: do not apply it). */
  parkRecord(operator: string, rec: StreamRecord): boolean {
    const here = this.recordLocation();
    const id = locationId(here);
    const parked = this.skip!.get(id);
    if (!parked) return false;
    this.deadLetters.push({ operator: parked.operator ?? operator, ...here, record: rec, error: parked.error, ...(parked.stack !== undefined ? { stack: parked.stack } : {}), attempts: parked.attempts });
    this.parked.push(id);
    return true;
  }

  /**
   * Fire a timer: the operator's onTimer for `t`, with the current key already set. A throw
   * (there or in an operator fed what it emitted) names the timer, so a retry can park it;
   * a parked one is not run: the timer counts as consumed, as its dead letter says. No
   * closure per firing (a window operator fires one timer per key and window).
   */
  timer(n: NodeRuntime, t: TimerEntry): void {
    if (this.skip !== undefined && this.parkCallback(n, t, 0)) return;
    const firing = this.firing;
    firing.node = n;
    firing.timer = t;
    try {
      n.op.onTimer!(t.domain, t.time, t.ns);
    } catch (e) {
      throw this.callbackFailure(n, e);
    } finally {
      firing.node = undefined;
      firing.timer = undefined;
    }
  }

  /** Run an operator's onWatermark(wm); a throw names the watermark callback, as timer() does a timer. */
  watermark(n: NodeRuntime, wm: number): void {
    if (this.skip !== undefined && this.parkCallback(n, undefined, wm)) return;
    const firing = this.firing;
    firing.node = n;
    firing.timer = undefined;
    firing.watermark = wm;
    try {
      n.op.onWatermark!(wm);
    } catch (e) {
      throw this.callbackFailure(n, e);
    } finally {
      firing.node = undefined;
    }
  }

  /** A callback a retry asked to park: its dead letter is recorded (true: do not run it). */
  private parkCallback(n: NodeRuntime, t: TimerEntry | undefined, watermark: number): boolean {
    const id = locationId(this.callbackLocation(n, t, watermark));
    const parked = this.skip!.get(id);
    if (!parked) return false;
    const what = t ? { timer: { operator: n.node.name, domain: t.domain, time: t.time, key: keyFromString(t.key), namespace: t.ns, consumed: true as const } } : { watermark };
    this.deadLetters.push({ operator: parked.operator ?? n.node.name, ...what, error: parked.error, ...(parked.stack !== undefined ? { stack: parked.stack } : {}), attempts: parked.attempts });
    this.parked.push(id);
    return true;
  }

  private callbackFailure(n: NodeRuntime, e: unknown): unknown {
    if (e instanceof UserCodeError) return e;
    return new RecordFailedError(n.node.name, undefined, e, this.location());
  }

  /** The input record being applied, or the timer or watermark callback running (built only when needed). */
  location(): FailureLocation | undefined {
    if (this.channel !== undefined) return this.recordLocation();
    const f = this.firing;
    return f.node ? this.callbackLocation(f.node, f.timer, f.watermark) : undefined;
  }

  private recordLocation(): RecordLocation {
    const l = { channel: this.channel!, seq: this.seq, index: this.index };
    return this.offset === undefined ? l : { ...l, offset: this.offset };
  }

  /** Where a callback is (timers fire in bulk: built only for a skip check or a throw). */
  private callbackLocation(n: NodeRuntime, timer: TimerEntry | undefined, watermark: number): CallbackLocation {
    const env = timer?.domain === 'processing' ? undefined : this.applying;
    const at = env ? { at: { channel: env.channel, seq: env.seq } } : {};
    // A copy of the timer: its object may be reused for another timer once its batch commits.
    return timer ? { operator: n.node.name, timer: { node: timer.node, domain: timer.domain, time: timer.time, kg: timer.kg, key: timer.key, ns: timer.ns }, ...at } : { operator: n.node.name, watermark, ...at };
  }
}
