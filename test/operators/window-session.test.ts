/**
 * Session windows with allowed lateness (window-session.ts): against the record-at-a-time
 * session model, late records and late firings included, and the state layout (a
 * session's contents keep one field while the session grows, merges and fires again).
 * Crashes and duplicates: window.test.ts (retained windows, sessions).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Windows } from '../../lib/api/windows.ts';
import { sessionField, sessionWindowOperator } from '../../lib/operators/window-session.ts';
import { windowKey } from '../../lib/operators/window-state.ts';
import { counts, operatorOver, outcome, processSessions, sessionModel, streamOf, withMerge } from './window-harness.ts';

/** Records up to 3 * delay + 4 ms behind the latest: some within a lateness of up to 2 * delay, some beyond. */
const streamArb = streamOf((delay) => 3 * delay + 4);
const latenessArb = fc.integer({ min: 1, max: 20 });

describe('session windows with allowed lateness', () => {
  it('match the record-at-a-time model: late firings of extended and bridged sessions, late records beyond the lateness', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 1, max: 20 }), latenessArb, async (s, gap, lateness) => {
        const run = await counts(s.items, Windows.session(gap), withMerge, { delay: s.delay, parallelism: 1, batch: 1, lateness });
        expect(outcome(run)).toEqual(outcome(sessionModel(s.items, gap, s.delay, lateness)));
      }),
      { seed: 1701, numRuns: 150 },
    );
  });

  it('a process function sees every record of the session at each firing, as the model counts them', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 1, max: 20 }), latenessArb, async (s, gap, lateness) => {
        const run = await processSessions(s.items, gap, { delay: s.delay, parallelism: 1, batch: 1, lateness });
        const model = sessionModel(s.items, gap, s.delay, lateness);
        expect(outcome(run)).toEqual(outcome(model));
        // Each firing's records are the session's: their times lie in [start, end - gap].
        let at = 0;
        for (const row of run.rows) {
          const es = run.seen.slice(at, (at += row.n));
          for (const e of es) expect(e.k === row.key && e.t >= row.start && e.t <= row.end - gap).toBe(true);
        }
      }),
      { seed: 1702, numRuns: 150 },
    );
  });
});

describe('session windows with allowed lateness, state layout', () => {
  const over = () => operatorOver(Windows.session(5), sessionWindowOperator, 10);
  const fields = (...ids: number[]) => ids.map(sessionField);

  it("keeps a session's records in one field named by its first record's time, appended in place as the session grows", () => {
    const { op, commit, stored, record, timers, deleted, emitted } = over();
    record(0);
    commit();
    const list = stored().get(sessionField(0));
    for (let t = 2; t <= 12; t += 2) {
      record(t);
      commit();
    }
    expect(stored()).toEqual(new Map<string, unknown>([['I', [0, 17, 0]], [sessionField(0), [0, 2, 4, 6, 8, 10, 12].map((t) => ({ t }))]]));
    expect(stored().get(sessionField(0))).toBe(list);
    // Each extension moved the session's timers: [0, 5) ... [0, 17).
    expect(timers).toEqual([4, 6, 8, 10, 12, 14, 16]);
    expect(deleted).toEqual([4, 14, 6, 16, 8, 18, 10, 20, 12, 22, 14, 24]);
    op.onTimer!('event', 16, windowKey(0, 17));
    commit();
    expect(emitted).toEqual([[0, 2, 4, 6, 8, 10, 12]]);
    // Fired, kept for the lateness, then gone.
    expect(timers.at(-1)).toBe(26);
    op.onTimer!('event', 26, windowKey(0, 17));
    commit();
    expect(stored().size).toBe(0);
  });

  it("a bridging record moves the later session's records into the earlier one's field; a late record fires the merged session", () => {
    const { op, commit, stored, record, emitted, setWatermark } = over();
    record(0);
    record(20);
    commit();
    expect([...stored().keys()].sort()).toEqual(['I', ...fields(0, 20)].sort());
    // [0, 5) fires and stays for the lateness; 12 bridges nothing (a session of its own); 16 joins [12, 17) and [20, 25).
    setWatermark(6);
    op.onTimer!('event', 4, windowKey(0, 5));
    record(12);
    record(16);
    commit();
    expect(stored()).toEqual(
      new Map<string, unknown>([
        ['I', [0, 5, 0, 12, 25, 12]],
        [sessionField(0), [{ t: 0 }]],
        [sessionField(12), [{ t: 12 }, { t: 20 }, { t: 16 }]],
      ]),
    );
    // 3, with the watermark past [0, 8)'s end but within the lateness: it joins the fired
    // [0, 5), and the merged session fires again at once.
    setWatermark(10);
    record(3);
    commit();
    expect(emitted).toEqual([[0], [0, 3]]);
    expect(stored().get('I')).toEqual([0, 8, 0, 12, 25, 12]);
  });
});
