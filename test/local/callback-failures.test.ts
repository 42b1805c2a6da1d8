/**
 * User code that throws outside a record (issue 3) on the embedded runtime: an event-time
 * timer, a window firing, a processing-time timer, and an operator chained behind a
 * window that throws on what the firing emitted. Each is retried (a fresh recovery per
 * attempt, maxAttempts in all), then parked as a dead letter naming the operator that
 * threw, the timer (owner, domain, time, key, namespace) and the error; the timer counts
 * as consumed and everything else goes on. A record that throws in a chained operator
 * is named by that operator and keeps its position.
 */
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock, WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { EmbeddedRuntime, runJob } from '../../lib/local/embedded.ts';

const strategy = WatermarkStrategies.boundedOutOfOrderness(0);

describe('callback failures on the embedded runtime', () => {
  it('retries an event-time timer that throws, then parks it as consumed; other timers fire', async () => {
    const calls: string[] = [];
    const job = new Job('timer-throws', { parallelism: 1 });
    const out = Sinks.collect<string>();
    job
      .fromItems('in', [{ k: 'a', t: 100 }, { k: 'bad', t: 110 }, { k: 'b', t: 120 }, { k: 'a', t: 900 }], { timestamp: (e) => e.t, watermark: strategy })
      .keyBy((e) => e.k)
      .process({
        processElement(e, ctx) {
          ctx.timers.registerEventTimeTimer(e.t + 100);
        },
        onTimer(t, ctx) {
          calls.push(`${ctx.key}@${t}`);
          if (ctx.key === 'bad') throw new Error(`timer of ${ctx.key} at ${t} refuses`);
          ctx.emit(`${ctx.key}@${t}`);
        },
      })
      .name('alarms')
      .sinkTo(out);
    const { runtime, stats } = await runJob(job, { sourceBatchSize: 1, maxAttempts: 3 });
    expect(out.records).toEqual(['a@200', 'b@220', 'a@1000']);
    expect(calls.filter((c) => c === 'bad@210')).toHaveLength(3); // three attempts, then parked: not run again
    expect(stats.recoveries).toBe(3);
    expect(runtime.deadLetters).toMatchObject([
      {
        operator: 'alarms',
        timer: { operator: 'alarms', domain: 'event', time: 210, key: 'bad', namespace: '', consumed: true },
        error: 'operator "alarms" threw: timer of bad at 210 refuses',
        attempts: 3,
      },
    ]);
  });

  it('parks a window firing whose function throws, naming the window; the other keys\' windows fire', async () => {
    const job = new Job('window-throws', { parallelism: 2, maxParallelism: 16 });
    const out = Sinks.collect<{ k: string; start: number; n: number }>();
    job
      .fromItems('in', ['a', 'x', 'b', 'a', 'x', 'b'].map((k, i) => ({ k, t: i * 100 })), { timestamp: (e) => e.t, watermark: strategy })
      .keyBy((e) => e.k)
      .window(Windows.tumbling(1000))
      .process<{ k: string; start: number; n: number }>((els, { key, window }, o) => {
        if (key === 'x') throw new Error('no windows for x');
        o.emit({ k: key as string, start: window.start, n: els.length });
      })
      .name('counts')
      .sinkTo(out);
    const { runtime } = await runJob(job);
    expect([...out.records].sort((p, q) => p.k.localeCompare(q.k))).toEqual([
      { k: 'a', start: 0, n: 2 },
      { k: 'b', start: 0, n: 2 },
    ]);
    expect(runtime.deadLetters).toHaveLength(1);
    const [d] = runtime.deadLetters;
    expect(d).toMatchObject({ operator: 'counts', attempts: 3, timer: { operator: 'counts', domain: 'event', key: 'x', consumed: true } });
    // Window operators fire at the window's end - 1: the window [0, 1000) (no namespace: one timer per key and end).
    expect(d.timer).toMatchObject({ time: 999, namespace: '' });
    expect(d.error).toMatch(/no windows for x/);
    expect(d.record).toBeUndefined();
  });

  it('names the chained operator that threw on what a window firing emitted, and the timer that fired', async () => {
    const job = new Job('chained-throws', { parallelism: 1 });
    const out = Sinks.collect<string>();
    job
      .fromItems('in', ['a', 'b', 'c'].map((k, i) => ({ k, t: i })), { timestamp: (e) => e.t, watermark: strategy })
      .keyBy((e) => e.k)
      .window(Windows.tumbling(10))
      .process<string>((_els, { key }, o) => o.emit(key as string))
      .name('keys')
      .map((k) => {
        if (k === 'b') throw new Error('b is not welcome');
        return k.toUpperCase();
      })
      .name('shout')
      .sinkTo(out);
    const { runtime } = await runJob(job);
    expect(out.records).toEqual(['A', 'C']);
    expect(runtime.deadLetters).toHaveLength(1);
    expect(runtime.deadLetters[0]).toMatchObject({ operator: 'shout', timer: { operator: 'keys', key: 'b', time: 9 } });
    expect(runtime.deadLetters[0].error).toMatch(/operator "shout" threw: b is not welcome/);
  });

  it('retries and parks a processing-time timer that throws; the partition goes on', async () => {
    const clock = new ManualClock(1000);
    let attempts = 0;
    const job = new Job('ptimer-throws', { parallelism: 1 });
    const out = Sinks.collect<string>();
    job
      .ingest<{ k: string }>('in')
      .keyBy((e) => e.k)
      .process({
        processElement(e, ctx) {
          ctx.timers.registerProcessingTimeTimer(ctx.timers.currentProcessingTime() + 500);
        },
        onTimer(t, ctx) {
          if (ctx.key === 'bad') {
            attempts++;
            throw new Error('processing timer refuses');
          }
          ctx.emit(`${ctx.key}@${t}`);
        },
      })
      .name('later')
      .sinkTo(out);
    const rt = new EmbeddedRuntime(job, { clock, maxAttempts: 2 });
    await rt.start();
    rt.offer('in', [{ k: 'bad' }, { k: 'ok' }]);
    while (await rt.step()) {}
    clock.advance(500);
    while (await rt.step()) {}
    expect(attempts).toBe(2);
    expect(out.records).toEqual(['ok@1500']);
    expect(rt.deadLetters).toMatchObject([
      { operator: 'later', timer: { operator: 'later', domain: 'processing', time: 1500, key: 'bad', namespace: '', consumed: true }, error: 'operator "later" threw: processing timer refuses', attempts: 2 },
    ]);
    // The partition goes on: new input and new timers.
    rt.offer('in', [{ k: 'ok' }]);
    while (await rt.step()) {}
    clock.advance(500);
    while (await rt.step()) {}
    expect(out.records).toEqual(['ok@1500', 'ok@2000']);
  });

  it('names the chained operator that threw on a record, not the stage\'s first one', async () => {
    const job = new Job('record-chain', { parallelism: 1 });
    const out = Sinks.collect<number>();
    job
      .fromItems('in', [1, 2, 3], { timestamp: () => 0 })
      .map((n) => n * 10)
      .name('times-ten')
      .map((n) => {
        if (n === 20) throw new Error('twenty');
        return n;
      })
      .name('picky')
      .sinkTo(out);
    const { runtime } = await runJob(job);
    expect(out.records).toEqual([10, 30]);
    expect(runtime.deadLetters).toHaveLength(1);
    expect(runtime.deadLetters[0]).toMatchObject({ operator: 'picky', channel: '0:0', index: 1, attempts: 3, record: { value: 2 } });
  });
});
