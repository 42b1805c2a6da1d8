/**
 * Sluice as a user gets it: `npm pack` of this repository installed into a fresh
 * `npm init -y` project (no repository files), with a job of the user's own that is not
 * Nexmark. Plain node imports every entry point; `sluice run` computes the job; `sluice
 * synth` works offline and every bundle holds that job; `--target assembly` runs those
 * bundles against the local servers with the template's IAM policies, giving the embedded
 * run's output with no call denied, and failing, naming the action, for a job whose sink
 * writes to a table the deployment does not own.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { physicalNames, sharedNames } from '../support/physical-names.ts';
import { devVersion, newProject, npmInstall, packedSluice, ROOT } from '../support/packed-sluice.ts';
import { localServerEnv } from '../aws/helpers.ts';

const WORK = mkdtempSync(join(tmpdir(), 'sluice-package-'));
/** docs/tutorial.md's folder, made and installed as the page does (test/docs/tutorial.test.ts), so the two share one kept install (npmInstall). */
const PROJECT = join(WORK, 'clicks');
const BLOCK_NETWORK = join(ROOT, 'test/infra/support/block-network.cjs');

/** The README's job (examples/order-alerts.ts, shown there verbatim), its threshold imported the NodeNext way (.js naming a .ts file). */
const ORDERS_JOB = readFileSync(join(ROOT, 'examples/order-alerts.ts'), 'utf8')
  .replace("from 'sluice';\n", "from 'sluice';\nimport { THRESHOLD } from './threshold.js';\n")
  .replace('if (total >= 100)', 'if (total >= THRESHOLD)');

/** A sink of the user's own that writes to a table outside the deployment: its role does not allow it. */
const AUDITED_JOB = `import { DynamoDBClient, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { Job, Sinks, type Sink, type SinkBatch } from 'sluice';

interface Order { customer: string; amount: number; time: number }

class AuditSink implements Sink<Order> {
  readonly kind = 'audit';
  private client?: DynamoDBClient;
  async write(batch: SinkBatch<Order>): Promise<void> {
    this.client ??= new DynamoDBClient({});
    for (const o of batch.records) await this.client.send(new PutItemCommand({ TableName: 'audit-log', Item: { id: { S: o.customer + '-' + o.time } } }));
  }
}

const job = new Job('audited-orders');
const orders = job.ingest<Order>('orders', { timestamp: (o) => o.time });
orders.filter((o) => o.amount > 10).sinkTo(Sinks.stdout(), 'big');
orders.sinkTo(new AuditSink(), 'audit');
export default job;
`;

interface Order {
  customer: string;
  amount: number;
  time: number;
}

/** Seeded orders (a small LCG), so every run sees the same input. */
function orders(n: number, seed = 7): Order[] {
  let s = seed;
  const next = () => (s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  return Array.from({ length: n }, (_, i) => ({ customer: `c${Math.floor(next() * 9)}`, amount: Math.floor(next() * 50), time: 1_000 * i }));
}

/** The job's semantics, written out: per customer in input order, an alert once the running total reaches 100. */
function expectedAlerts(input: readonly Order[]): string[] {
  const totals = new Map<string, number>();
  const out: string[] = [];
  for (const o of input) {
    const total = (totals.get(o.customer) ?? 0) + o.amount;
    totals.set(o.customer, total);
    if (total >= 100) out.push(JSON.stringify({ customer: o.customer, total, at: o.time }));
  }
  return out.sort();
}

const INPUT = orders(300);

function sluice(args: readonly string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [join(PROJECT, 'node_modules/sluice/bin/sluice.js'), ...args], {
    cwd: PROJECT,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 240_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const templateNames = (file: string) => physicalNames((JSON.parse(readFileSync(join(PROJECT, file), 'utf8')) as { Resources: Parameters<typeof physicalNames>[0] }).Resources);

const lines = (file: string) =>
  readFileSync(join(PROJECT, file), 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .sort();

/** The test's local servers, as the SDK's endpoint variables (the CLI starts none of its own then). */
const localServers = localServerEnv;

beforeAll(() => {
  // npm pack runs the prepack build (tsc into dist/), as a publish would (once per content of the sources: packedSluice).
  const tarball = packedSluice();
  newProject(PROJECT);
  npmInstall(PROJECT, [tarball]);
  npmInstall(PROJECT, ['vitest', 'aws-cdk-lib', 'constructs', 'cdk-nag'].map(devVersion), { dev: true });
  mkdirSync(join(PROJECT, 'jobs'));
  if (!ORDERS_JOB.includes("import { THRESHOLD } from './threshold.js'") || !ORDERS_JOB.includes('total >= THRESHOLD')) throw new Error('examples/order-alerts.ts changed: the test can no longer derive its job from it');
  writeFileSync(join(PROJECT, 'jobs/orders.ts'), ORDERS_JOB);
  writeFileSync(join(PROJECT, 'jobs/threshold.ts'), 'export const THRESHOLD: number = 100;\n');
  writeFileSync(join(PROJECT, 'jobs/audited.ts'), AUDITED_JOB);
  writeFileSync(join(PROJECT, 'orders.jsonl'), INPUT.map((o) => JSON.stringify(o)).join('\n') + '\n');
}, 600_000);

afterAll(() => rmSync(WORK, { recursive: true, force: true }));

describe('the packed package in a fresh project', () => {
  it('ships compiled JavaScript with types, not the sources or the tests', () => {
    const pkg = join(PROJECT, 'node_modules/sluice');
    const top = readdirSync(pkg).sort();
    expect(top).toEqual(['README.md', 'bin', 'dist', 'package.json']);
    expect(readdirSync(join(pkg, 'dist/lib')).some((f) => f === 'index.d.ts')).toBe(true);
    expect(JSON.stringify(readdirSync(join(pkg, 'dist'), { recursive: true }))).not.toMatch(/\.test\.|(?<!\.d)\.ts"/);
  });

  it('imports with plain node: sluice, sluice/testing, sluice/aws (with the AWS sinks), sluice/cdk', () => {
    const script = `
      const api = await import('sluice');
      const testing = await import('sluice/testing');
      const aws = await import('sluice/aws');
      const cdk = await import('sluice/cdk');
      console.log(JSON.stringify({
        job: typeof api.Job, z: typeof api.z.object, collect: typeof testing.CollectSink, local: typeof testing.openLocalAws,
        handler: typeof aws.createOperatorHandler, awsSinks: [typeof aws.AwsSinks.s3Files, typeof aws.AwsSinks.dynamodbUpsert], apiSinks: Object.keys(api.Sinks).sort(),
        construct: typeof cdk.SluiceJob,
      }));`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: PROJECT, encoding: 'utf8' });
    expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual({
      job: 'function',
      z: 'function',
      collect: 'function',
      local: 'function',
      handler: 'function',
      awsSinks: ['function', 'function'],
      apiSinks: ['collect', 'jsonLinesFile', 'stdout'],
      construct: 'function',
    });
  });

  it("sluice --version prints the installed package's version", () => {
    const r = sluice(['--version']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version}\n`);
  });

  it('sluice run computes the job (a .ts module with a relative import, in a CommonJS project, importing sluice from node_modules)', () => {
    const r = sluice(['run', 'jobs/orders.ts', '--input', 'orders.jsonl', '--output', 'alerts.jsonl']);
    expect(r.code, r.stderr).toBe(0);
    expect(lines('alerts.jsonl')).toEqual(expectedAlerts(INPUT));
    expect(lines('alerts.jsonl').length).toBeGreaterThan(100);
  }, 120000);

  it('sluice synth works offline, and every bundle holds this job and no other', () => {
    const networkLog = join(WORK, 'network.log');
    const r = sluice(['synth', 'jobs/orders.ts', '--output', 'cdk.out'], { NODE_OPTIONS: `--require ${BLOCK_NETWORK}`, SLUICE_NETWORK_LOG: networkLog, AWS_EC2_METADATA_DISABLED: 'true' });
    expect(r.code, r.stderr.slice(-3000)).toBe(0);
    expect(r.stderr).toMatch(/cdk-nag AwsSolutions clean/);
    let network = '';
    try {
      network = readFileSync(networkLog, 'utf8');
    } catch {
      // nothing was attempted
    }
    expect(network).toBe('');
    const assets = readdirSync(join(PROJECT, 'cdk.out')).filter((d) => d.startsWith('asset.'));
    expect(assets.length).toBeGreaterThanOrEqual(3);
    for (const a of assets) {
      const code = readFileSync(join(PROJECT, 'cdk.out', a, 'index.mjs'), 'utf8');
      expect(code).toContain('order-alerts');
      expect(code).toContain('big-spenders');
      expect(code).not.toMatch(/nexmark|page-views/);
    }
  }, 240000);

  it('sluice run --target assembly runs those bundles with their IAM policies: the embedded output, no call denied', () => {
    const r = sluice(['run', 'jobs/orders.ts', '--input', 'orders.jsonl', '--output', 'alerts-assembly.jsonl', '--target', 'assembly', '--assembly', 'cdk.out'], localServers());
    expect(r.code, r.stderr.slice(-3000)).toBe(0);
    expect(r.stderr).toMatch(/assembly: 0 denied AWS calls/);
    expect(lines('alerts-assembly.jsonl')).toEqual(lines('alerts.jsonl'));
  }, 240000);

  it('fails the assembly run of a job whose sink writes to a table the deployment does not own, naming the denied action', () => {
    const r = sluice(['run', 'jobs/audited.ts', '--input', 'orders.jsonl', '--output', 'big.jsonl', '--sink', 'big', '--target', 'assembly'], localServers());
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/called dynamodb:PutItem on arn:aws:dynamodb:[^ ]+:table\/audit-log: denied by its role's policies/);
  }, 240000);

  it('sluice synth of two jobs, and of one job under two stack names, gives templates with no physical name in common', () => {
    for (const args of [['jobs/audited.ts', '--output', 'cdk.audited'], ['jobs/orders.ts', '--stack-name', 'Orders-staging', '--output', 'cdk.staging']]) {
      const r = sluice(['synth', ...args, '--no-nag']);
      expect(r.code, r.stderr.slice(-2000)).toBe(0);
    }
    const orders = templateNames('cdk.out/Sluice-order-alerts.template.json');
    const staging = templateNames('cdk.staging/Orders-staging.template.json');
    const audited = templateNames('cdk.audited/Sluice-audited-orders.template.json');
    expect(orders).toContain('AWS::SQS::Queue.QueueName=order-alerts-s0.fifo');
    expect(staging).toContain('AWS::SQS::Queue.QueueName=Orders-staging-order-alerts-s0.fifo');
    expect(staging.length).toBe(orders.length);
    for (const [a, b] of [[orders, staging], [orders, audited], [staging, audited]]) expect(sharedNames(a, b)).toEqual([]);
  }, 360000);
});
