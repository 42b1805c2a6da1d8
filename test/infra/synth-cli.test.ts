/**
 * `npx cdk synth` as a user runs it on a fresh clone: a child process, a new output
 * directory, no AWS credentials, no cdk.context.json, and no network (every
 * non-loopback connection is refused and recorded, support/block-network.cjs). It
 * bundles the handlers with esbuild, runs cdk-nag (app.ts) and aws-cdk-lib's template
 * validation. One synth for the whole file: about 20 s of CPU.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { REQUIRE_BANNER } from '../../infra/function.ts';

const REPO_ROOT = new URL('../..', import.meta.url).pathname;
import { stackNameFor } from '../../infra/stack.ts';
import { job } from '../../examples/nexmark/q5.ts';

const OUT = mkdtempSync(join(tmpdir(), 'sluice-synth-'));
const NETWORK_LOG = join(OUT, '..', `${OUT.split('/').pop()}-network.log`);
const STACK = stackNameFor(job.name);
let run: { status: number | null; stdout: string; stderr: string; seconds: number };

beforeAll(() => {
  const env: NodeJS.ProcessEnv = {};
  // A clean environment: no credentials, profile or endpoints from the developer's shell.
  for (const [k, v] of Object.entries(process.env)) if (!/^(AWS_|CDK_)/.test(k) && k !== 'NODE_OPTIONS') env[k] = v;
  Object.assign(env, {
    NODE_OPTIONS: `--require ${join(REPO_ROOT, 'test/infra/support/block-network.cjs')}`,
    SLUICE_NETWORK_LOG: NETWORK_LOG,
    AWS_EC2_METADATA_DISABLED: 'true',
    CDK_DISABLE_CLI_TELEMETRY: 'true',
  });
  const started = performance.now();
  const r = spawnSync('npx', ['cdk', 'synth', '--quiet', '--no-notices', '--output', OUT], { cwd: REPO_ROOT, env, encoding: 'utf8', timeout: 290_000 });
  run = { status: r.status, stdout: r.stdout, stderr: r.stderr, seconds: (performance.now() - started) / 1000 };
  console.info(`npx cdk synth: ${run.seconds.toFixed(1)} s wall`);
}, 300_000);

const template = () => JSON.parse(readFileSync(join(OUT, `${STACK}.template.json`), 'utf8')) as { Resources: Record<string, { Type: string; Properties: Record<string, any> }> };

describe('npx cdk synth (offline, fresh output directory)', () => {
  it('succeeds without credentials, lookups or network', () => {
    expect(run.status, run.stderr.slice(-3000)).toBe(0);
    expect(existsSync(join(OUT, 'manifest.json'))).toBe(true);
    expect(existsSync(NETWORK_LOG) ? readFileSync(NETWORK_LOG, 'utf8') : '').toBe('');
    // No context lookup happened (they would need credentials and write cdk.context.json).
    expect(existsSync(join(REPO_ROOT, 'cdk.context.json'))).toBe(false);
  });

  it('passes cdk-nag (every finding compliant or suppressed with a reason) and the template validation', () => {
    const csv = readFileSync(join(OUT, `AwsSolutions-${STACK}-NagReport.csv`), 'utf8').trim().split('\n').slice(1);
    expect(csv.length).toBeGreaterThan(20);
    expect(csv.filter((row) => row.includes('"Non-Compliant"'))).toEqual([]);
    for (const row of csv.filter((r) => r.includes('"Suppressed"'))) expect(row).toMatch(/"Suppressed","[^"]{40,}"/);
    const report = JSON.parse(readFileSync(join(OUT, 'validation-report.json'), 'utf8')) as { pluginReports: { summary?: { status?: string } }[] };
    for (const r of report.pluginReports) expect(r.summary?.status).not.toBe('failure');
  });

  it('bundles each handler once as an ESM file with the require banner and a source map', () => {
    const fns = Object.values(template().Resources).filter((r) => r.Type === 'AWS::Lambda::Function');
    // Three stage operators, the ingest function and the checkpoint coordinator's task function.
    expect(fns).toHaveLength(5);
    const assets = new Set(fns.map((f) => f.Properties.Code.S3Key as string));
    // Every stage runs the same operator bundle: esbuild ran three times (operator, ingest, checkpoint), not five.
    expect(assets.size).toBe(3);
    const dirs = readdirSync(OUT).filter((d) => d.startsWith('asset.'));
    expect(dirs).toHaveLength(3);
    for (const d of dirs) {
      expect(readdirSync(join(OUT, d)).sort()).toEqual(['index.mjs', 'index.mjs.map']);
      expect(readFileSync(join(OUT, d, 'index.mjs'), 'utf8').startsWith(REQUIRE_BANNER)).toBe(true);
    }
  });

  it('produces bundles that load and answer (the ingest function with its back-pressure bounds): ingest /healthz, operator on an empty batch', () => {
    // In a plain node process: vitest would run each 1 MB bundle through its transform.
    const bundles = readdirSync(OUT).filter((d) => d.startsWith('asset.')).map((d) => pathToFileURL(join(OUT, d, 'index.mjs')).href);
    // The same probe for all: the ingest handler routes it, the operator sees no records, and the
    // checkpoint task function refuses it (it only takes Step Functions task input).
    const probe = { rawPath: '/healthz', requestContext: { http: { method: 'GET' }, stage: '$default' }, headers: {}, Records: [] };
    const script = `const out = []; for (const b of ${JSON.stringify(bundles)}) out.push(await import(b).then((m) => m.handler(${JSON.stringify(probe)})).catch((e) => ({ refused: String(e && e.message) }))); process.stdout.write('\\n' + JSON.stringify(out));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, AWS_REGION: 'us-east-1', SLUICE_BUCKET: 'probe-bucket', SLUICE_INGEST_MAX_QUEUED_MESSAGES: '500', SLUICE_INGEST_MAX_QUEUE_AGE_S: '300' } });
    expect(r.status, r.stderr).toBe(0);
    const answers = JSON.parse(r.stdout.trim().split('\n').pop()!) as any[];
    const health = answers.find((a) => a?.statusCode === 200);
    expect(JSON.parse(health.body)).toMatchObject({ status: 'ok', streams: ['events'] });
    expect(answers).toContainEqual({ batchItemFailures: [] });
    expect(answers.filter((a) => 'refused' in a)).toHaveLength(1);
  });

  it('refuses to start a bundle whose job compiles to another plan than the one it was deployed for', () => {
    const fingerprints = new Set(
      Object.values(template().Resources)
        .filter((r) => r.Type === 'AWS::Lambda::Function' && r.Properties.Environment?.Variables?.SLUICE_PLAN_FINGERPRINT)
        .map((r) => r.Properties.Environment.Variables.SLUICE_PLAN_FINGERPRINT as string),
    );
    // Every function carries the one plan the construct compiled.
    expect(fingerprints.size).toBe(1);
    const bundle = pathToFileURL(join(OUT, readdirSync(OUT).find((d) => d.startsWith('asset.'))!, 'index.mjs')).href;
    const script = `await import(${JSON.stringify(bundle)}).then(() => console.log('started'), (e) => console.log(String(e.message)));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, AWS_REGION: 'us-east-1', SLUICE_PLAN_FINGERPRINT: '0123456789abcdef' } });
    expect(r.stdout).toMatch(/the bundled job: expected the plan this function was deployed for \(fingerprint 0123456789abcdef; .*jobModule.*\), received job "nexmark-q5" with plan fingerprint [0-9a-f]{16}/);
    expect(r.stdout).not.toContain('started');
  });
});
