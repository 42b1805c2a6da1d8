/**
 * A restore killed before its first checkpoint loses nothing: `sluice dev` counts views
 * and stops with a checkpoint; `sluice restore --from <epoch>` serves from it and takes
 * more views, then dies by SIGKILL before a checkpoint of its own; `sluice dev --resume`
 * restores the same checkpoint again and replays what the endpoint logged after it, so
 * every view that got a 202 is counted once (`sluice state get`).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { serveJob, sluice } from './helpers.ts';

const JOB = 'test/cli/count-job.ts';
const PAGES = ['/a', '/b', '/c'];
const views = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ page: PAGES[(from + i) % 3], time: 1_000 + from + i }));

/** Until `records` were processed and checkpoint `epoch` (or a later one) completed. */
async function checkpointed(url: string, records: number, epoch: number): Promise<void> {
  const end = Date.now() + 30_000;
  for (;;) {
    const s = (await (await fetch(`${url}/stats`)).json()) as { recordsIn: Record<string, number>; lastCheckpoint: number | null };
    if (s.recordsIn['per-page'] === records && (s.lastCheckpoint ?? 0) >= epoch) return;
    if (Date.now() > end) throw new Error(`no checkpoint ${epoch} after ${records} records: ${JSON.stringify(s.recordsIn)}, last ${s.lastCheckpoint}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function publish(url: string, events: unknown[]): Promise<void> {
  const res = await fetch(`${url}/streams/views/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });
  expect(res.status).toBe(202);
}

describe('a restore killed before its first checkpoint', () => {
  it('is restored again by --resume: every view that got a 202 counted once', async () => {
    const ck = join(mkdtempSync(join(tmpdir(), 'sluice-restore-crash-')), 'ck');
    const flags = ['--checkpoint-dir', ck, '--checkpoint-interval', '0'];

    // Two checkpoints while it runs, so the log before the second is truncated: it holds only what came after.
    const dev = await serveJob(['dev', JOB, '--checkpoint-dir', ck, '--checkpoint-interval', '100', '--port', '0']);
    await publish(dev.url, views(0, 300));
    await checkpointed(dev.url, 300, 1);
    await publish(dev.url, views(300, 300));
    await checkpointed(dev.url, 600, 2);
    dev.child.kill('SIGINT');
    expect(await dev.exited).toBe(EXIT.ok);
    const listed = await sluice(['checkpoints', JOB, '--checkpoint-dir', ck, '--json']);
    const epoch = String((JSON.parse(listed.stdout) as { checkpoints: { epoch: number; latest?: boolean }[] }).checkpoints.at(-1)!.epoch);

    const restored = await serveJob(['restore', JOB, '--from', epoch, ...flags, '--port', '0']);
    await publish(restored.url, views(600, 150));
    restored.child.kill('SIGKILL');
    await restored.exited;

    const resumed = await serveJob(['dev', JOB, ...flags, '--resume', '--port', '0']);
    resumed.child.kill('SIGINT');
    expect(await resumed.exited).toBe(EXIT.ok);

    for (const page of PAGES) {
      const r = await sluice(['state', 'get', JOB, 'per-page', page, '--checkpoint-dir', ck, '--json']);
      expect(r.code, r.stderr).toBe(EXIT.ok);
      expect(JSON.parse(r.stdout).state, page).toEqual({ n: 250 });
    }
  }, 120_000);
});
