/** The README's own-project job (examples/order-alerts.ts): shown verbatim, and it alerts as it says. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import job from '../../examples/order-alerts.ts';
import { CollectSink, runJob } from '../../lib/testing/index.ts';
import { ROOT } from '../cli/helpers.ts';

describe('examples/order-alerts.ts', () => {
  it('is the code block of README.md', () => {
    const text = readFileSync(join(ROOT, 'examples/order-alerts.ts'), 'utf8').trim();
    const blocks = [...readFileSync(join(ROOT, 'README.md'), 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1].trim());
    expect(blocks).toContain(text);
  });

  it("alerts once a customer's running total reaches 100, per customer in order", async () => {
    const alerts = new CollectSink<unknown>();
    await runJob(job, {
      sources: { orders: { kind: 'items', items: [
        { customer: 'ada', amount: 60, time: 1 },
        { customer: 'bob', amount: 30, time: 2 },
        { customer: 'ada', amount: 50, time: 3 },
        { customer: 'ada', amount: 5, time: 4 },
      ] } },
      sinks: { alerts },
    });
    expect(alerts.records).toEqual([{ customer: 'ada', total: 110, at: 3 }, { customer: 'ada', total: 115, at: 4 }]);
  });
});
