/**
 * The local-AWS runner's stall report (stall-watch.ts): with a log (`SLUICE_DEBUG=1` in
 * the CLI), a run that makes no progress for stallReportMs says what it waits on, per
 * stage queue and event source, and where the checkpoint loop is. Here a started run
 * whose ingestion stream gets nothing: nothing progresses, so the report comes; once the
 * run is stopped, no more.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../../../lib/testing/local-aws/runner.ts';
import { countsJob } from '../../aws/checkpoint-jobs.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
afterAll(() => env.close());

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; !cond(); i++) {
    if (i > 600) throw new Error(`${what}: not seen in time`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('local-AWS stall report', () => {
  it('a run with nothing to do reports its queues, event sources and checkpoint loop', async () => {
    const lines: string[] = [];
    const runtime = new LocalAwsRuntime(countsJob({ name: 'quiet' }), {
      env,
      log: (l) => lines.push(l),
      stallReportMs: 300,
      checkpoints: { dir: mkdtempSync(join(tmpdir(), 'sluice-local-stall-')), intervalMs: 0, start: 'fresh' },
    });
    try {
      await runtime.start();
      await until(() => lines.some((l) => l.startsWith('no progress')), 'a report');
    } finally {
      await runtime.stop();
    }
    const at = lines.findIndex((l) => l.startsWith('no progress'));
    const report = lines.slice(at, at + 4);
    expect(report[0]).toMatch(/^no progress for \d+ s \(phase: running; 0 records fed\):$/);
    const stages = runtime.plan.stages.map((s) => s.name);
    expect(stages).toHaveLength(2);
    for (const [i, name] of stages.entries()) {
      expect(report[1 + i]).toMatch(new RegExp(`^  stage ${name.replace(/[^\w]/g, '.')}: queue visible 0, in flight 0, delayed 0; polling, 0 invocations running, 0 releases waiting, groups in flight \\[\\]; invocations 0, failed 0, deleted 0, undeleted 0, release failures 0, timeouts 0, group conflicts 0$`));
    }
    expect(report[3]).toMatch(/^  checkpoint loop waiting after wait \(epoch 0\); committed 0 \(last -\), aborted 0$/);
    // Stopped: no more reports.
    const n = lines.length;
    await new Promise((r) => setTimeout(r, 700));
    expect(lines.length).toBe(n);
  }, 60_000);
});
