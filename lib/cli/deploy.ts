/**
 * `sluice synth|deploy|destroy <job>`: the job's CDK app (infra/job-app.ts) built in this
 * process from the user's job module, synthesized offline into a cloud assembly (cdk-nag
 * on), then handed to the AWS CDK CLI of the user's project (`cdk deploy|destroy --app
 * <assembly>`). aws-cdk-lib and the CDK CLI are optional peer dependencies: loaded only
 * here, with an install hint when missing.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import type { Job } from '../api/stream.ts';
import { type IdleMonthly, idleMonthly } from '../aws/cost/cost-model.ts';
import { ConfigError, SluiceError } from '../errors.ts';
import { loadJob, parseParams } from './load-job.ts';
import { parseParallelism } from './parallelism-flag.ts';

export interface DeployFlags {
  readonly output?: string;
  readonly stackName?: string;
  readonly param?: readonly string[];
  /** `--parallelism P|operator=P`: SluiceJob's `parallelism` (parallelism-flag.ts). */
  readonly parallelism?: readonly string[];
  readonly endpoint?: 'httpApi' | 'functionUrl';
  readonly removalPolicy?: 'retain' | 'destroy';
  readonly queuePrefix?: string;
  /** Default true: the checkpoint state machine. */
  readonly checkpoints?: boolean;
  /** Default true: cdk-nag's AwsSolutions checks (errors fail the synth). */
  readonly nag?: boolean;
  /** Default true: aws-cdk-lib's template schema validation (about 12 s of CPU). */
  readonly validate?: boolean;
  readonly requireApproval?: 'never' | 'any-change' | 'broadening';
  readonly force?: boolean;
}

type Log = (line: string) => void;
const stderr: Log = (l) => process.stderr.write(l + '\n');

/** cdk-nag (or another aspect) reported errors: the template would not pass review. */
export class SynthesisError extends SluiceError {
  readonly code = 'SYNTHESIS';
  readonly retryable = false;
  constructor(readonly findings: readonly string[]) {
    super(`synthesis reported ${findings.length} error(s):\n${findings.map((f) => `  ${f}`).join('\n')}`);
  }
}

/** The CDK CLI failed; its own output went to the terminal. */
export class CdkCliError extends SluiceError {
  readonly code = 'CDK_CLI';
  readonly retryable = false;
  constructor(
    readonly command: string,
    readonly exitCode: number | null,
  ) {
    super(`\`cdk ${command}\` exited with ${exitCode === null ? 'a signal' : `code ${exitCode}`} (its output is above)`);
  }
}

export interface Synthesized {
  readonly job: Job;
  readonly jobModule: string;
  readonly outdir: string;
  readonly stackName: string;
  readonly templateFile: string;
  /** Construct paths of the functions, each bundling the job module. */
  readonly functions: readonly string[];
  readonly streams: readonly string[];
  /** What the stack bills a month at zero traffic, besides storage. */
  readonly idle: IdleMonthly;
}

const INSTALL_CDK = 'npm install --save-dev aws-cdk-lib constructs cdk-nag';

async function importInfra() {
  try {
    const [jobApp, machine] = await Promise.all([import('../../infra/job-app.ts'), import('../../infra/checkpoint-state-machine.ts')]);
    return { createJobApp: jobApp.createJobApp, checkpointStateMachine: machine.checkpointStateMachine };
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    const missing = /Cannot find (?:package|module) '([^']+)'/.exec(err.message ?? '')?.[1];
    if (err.code === 'ERR_MODULE_NOT_FOUND' && missing && /^(aws-cdk-lib|constructs|cdk-nag)/.test(missing)) {
      throw new ConfigError('the project', `aws-cdk-lib, constructs and cdk-nag installed beside sluice (${INSTALL_CDK})`, `no "${missing}"`);
    }
    throw e;
  }
}

/** Builds the job's app and writes its cloud assembly; fails on cdk-nag errors. */
export async function synthesize(jobPath: string, flags: DeployFlags, log: Log = stderr): Promise<Synthesized> {
  const params = parseParams(flags.param);
  const job = await loadJob(jobPath, params);
  const { createJobApp, checkpointStateMachine } = await importInfra();
  const outdir = resolve(flags.output ?? 'cdk.out');
  const context: Record<string, unknown> = {
    'sluice:endpoint': flags.endpoint ?? 'httpApi',
    'sluice:removalPolicy': flags.removalPolicy ?? 'retain',
    'sluice:nag': String(flags.nag ?? true),
  };
  if (flags.queuePrefix !== undefined) context['sluice:queuePrefix'] = flags.queuePrefix;
  const jobModule = resolve(jobPath);
  const { app, stack } = createJobApp({
    job,
    jobModule,
    jobParams: params,
    parallelism: parseParallelism(flags.parallelism),
    stackName: flags.stackName,
    context,
    checkpoints: flags.checkpoints === false ? undefined : checkpointStateMachine,
    outdir,
    validate: flags.validate ?? true,
  });
  const assembly = app.synth();
  const artifact = assembly.getStackArtifact(stack.artifactId);
  const errors = artifact.messages.filter((m) => m.level === 'error').map((m) => `${m.id}: ${String(m.entry.data).split('\n')[0]}`);
  if (errors.length) throw new SynthesisError(errors);
  const warnings = artifact.messages.filter((m) => m.level === 'warning').length;
  const result: Synthesized = {
    job,
    jobModule,
    outdir,
    stackName: stack.stackName,
    templateFile: artifact.templateFullPath,
    functions: stack.sluice.functions.map((f) => f.fn.node.path),
    streams: ingestStreams(job),
    idle: idleMonthly(resourceTypes(artifact.templateFullPath)),
  };
  const shown = (p: string) => relative(process.cwd(), p) || '.';
  log(`synthesized stack ${result.stackName} of job "${job.name}" into ${shown(outdir)}${flags.nag === false ? ' (cdk-nag off)' : ', cdk-nag AwsSolutions clean'}${warnings ? `, ${warnings} warning(s)` : ''}`);
  log(`  template   ${shown(result.templateFile)}`);
  const idle = result.idle;
  log(`  idle cost  $${idle.dollars.toFixed(2)} a month at zero traffic (${idle.dashboards} dashboard, ${idle.alarms} alarms) plus storage; everything else is per request`);
  log(`  functions  ${result.functions.length}, each bundling ${shown(jobModule)}: ${result.functions.map((f) => f.split('/').slice(-1)[0]).join(', ')}`);
  return result;
}

function resourceTypes(templateFile: string): Record<string, number> {
  const template = JSON.parse(readFileSync(templateFile, 'utf8')) as { Resources?: Record<string, { Type: string }> };
  const counts: Record<string, number> = {};
  for (const r of Object.values(template.Resources ?? {})) counts[r.Type] = (counts[r.Type] ?? 0) + 1;
  return counts;
}

function ingestStreams(job: Job): string[] {
  return job.graph
    .sources()
    .filter((n) => n.spec.kind === 'source' && n.spec.source.binding.kind === 'ingest')
    .map((n) => n.name);
}

export async function synthCommand(jobPath: string, flags: DeployFlags, log: Log = stderr): Promise<Synthesized> {
  const s = await synthesize(jobPath, flags, log);
  log(`next: sluice deploy ${jobPath}${flags.stackName ? ` --stack-name ${flags.stackName}` : ''}  (or \`sluice run ${jobPath} --target assembly --assembly ${relative(process.cwd(), s.outdir) || '.'} ...\` to try the bundles locally)`);
  return s;
}

/** The AWS CDK CLI of the user's project (or of Sluice's own dependencies). */
export function cdkCliPath(from = process.cwd()): string {
  for (const base of [join(from, 'package.json'), import.meta.url]) {
    try {
      const pkg = createRequire(base).resolve('aws-cdk/package.json');
      const bin = (JSON.parse(readFileSync(pkg, 'utf8')) as { bin?: Record<string, string> }).bin?.cdk;
      if (bin) return join(dirname(pkg), bin);
    } catch {
      // not installed there
    }
  }
  throw new ConfigError('the project', 'the AWS CDK CLI installed (npm install --save-dev aws-cdk@2)', 'no aws-cdk package');
}

/** `quietStdout`: the CDK CLI's stdout goes to stderr, so that stdout carries one JSON object (--json). */
function runCdk(args: readonly string[], quietStdout = false): Promise<void> {
  const cli = cdkCliPath();
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [cli, ...args], { stdio: ['inherit', quietStdout ? process.stderr : 'inherit', 'inherit'], env: { ...process.env, CDK_DISABLE_CLI_TELEMETRY: process.env.CDK_DISABLE_CLI_TELEMETRY ?? 'true' } });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolvePromise() : reject(new CdkCliError(args[0], code))));
  });
}

/** What a user needs after a deploy, from the stack's outputs (infra/stack.ts). */
/** The flags of a deploy that its destroy needs again: the stack it names, the job it builds, what the report says is retained. */
type DestroyFlags = Pick<DeployFlags, 'removalPolicy' | 'param' | 'queuePrefix'>;

export function describeOutputs(s: Pick<Synthesized, 'stackName' | 'streams'>, outputs: Record<string, string>, jobPath: string, flags: DestroyFlags = {}): string[] {
  const lines = [`deployed ${s.stackName}:`];
  const label: Record<string, string> = {
    EndpointUrl: 'endpoint',
    StateTableName: 'state table',
    SnapshotBucketName: 'snapshot bucket',
    ResultLogGroups: 'result log groups',
    DeadLetterQueueUrls: 'dead-letter queues',
    DashboardName: 'dashboard',
  };
  for (const [key, name] of Object.entries(label)) if (outputs[key] !== undefined) lines.push(`  ${name.padEnd(18)} ${outputs[key]}`);
  const url = outputs.EndpointUrl;
  if (url) for (const stream of s.streams) lines.push(`next: sluice publish ${stream} events.jsonl --url ${url}`);
  const again = [
    ...(s.stackName.startsWith('Sluice-') ? [] : ['--stack-name', s.stackName]),
    ...(flags.queuePrefix !== undefined ? ['--queue-prefix', flags.queuePrefix] : []),
    ...(flags.param ?? []).flatMap((p) => ['--param', p]),
    ...(flags.removalPolicy === 'destroy' ? ['--removal-policy', 'destroy'] : []),
  ];
  lines.push(`remove it: sluice destroy ${[jobPath, ...again].join(' ')}`);
  return lines;
}

/** `sluice deploy --json`: the stack, its outputs by their CloudFormation names, and the commands to use it. */
export interface DeployResult {
  readonly job: string;
  readonly stackName: string;
  readonly outdir: string;
  readonly outputs: Record<string, string>;
  readonly streams: readonly string[];
  readonly publish: readonly string[];
  readonly destroy: string;
}

export function deployResult(s: Pick<Synthesized, 'stackName' | 'streams' | 'outdir'> & { job: Pick<Job, 'name'> }, outputs: Record<string, string>, jobPath: string, flags: DestroyFlags = {}): DeployResult {
  const lines = describeOutputs(s, outputs, jobPath, flags);
  return {
    job: s.job.name,
    stackName: s.stackName,
    outdir: s.outdir,
    outputs,
    streams: s.streams,
    publish: lines.filter((l) => l.startsWith('next: ')).map((l) => l.slice('next: '.length)),
    destroy: lines.at(-1)!.slice('remove it: '.length),
  };
}

/** `sluice destroy --json`: what was deleted and whether the stateful resources outlive it. */
export interface DestroyResult {
  readonly job: string;
  readonly stackName: string;
  readonly destroyed: true;
  readonly retained: boolean;
}

export function destroyResult(s: Pick<Synthesized, 'stackName'> & { job: Pick<Job, 'name'> }, removalPolicy: DeployFlags['removalPolicy']): DestroyResult {
  return { job: s.job.name, stackName: s.stackName, destroyed: true, retained: removalPolicy !== 'destroy' };
}

export async function deployCommand(jobPath: string, flags: DeployFlags & { json?: boolean }, log: Log = stderr): Promise<DeployResult> {
  const s = await synthesize(jobPath, flags, log);
  const outputsFile = join(s.outdir, `${s.stackName}.outputs.json`);
  await runCdk(['deploy', s.stackName, '--app', s.outdir, '--outputs-file', outputsFile, '--require-approval', flags.requireApproval ?? 'broadening', '--no-notices'], flags.json);
  const outputs = existsSync(outputsFile) ? ((JSON.parse(readFileSync(outputsFile, 'utf8')) as Record<string, Record<string, string>>)[s.stackName] ?? {}) : {};
  for (const line of describeOutputs(s, outputs, jobPath, flags)) log(line);
  return deployResult(s, outputs, jobPath, flags);
}

export async function destroyCommand(jobPath: string, flags: DeployFlags & { json?: boolean }, log: Log = stderr): Promise<DestroyResult> {
  // The CLI needs the template only: no cdk-nag, no schema validation.
  const s = await synthesize(jobPath, { ...flags, nag: false, validate: false }, () => {});
  await runCdk(['destroy', s.stackName, '--app', s.outdir, '--no-notices', ...(flags.force ? ['--force'] : [])], flags.json);
  log(`destroyed ${s.stackName}${flags.removalPolicy === 'destroy' ? '' : ' (the state table, buckets and log groups are retained: delete them by hand, or deploy with --removal-policy destroy)'}`);
  return destroyResult(s, flags.removalPolicy);
}
