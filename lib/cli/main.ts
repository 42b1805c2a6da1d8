/**
 * The `sluice` command line (bin/sluice.js). Only wiring: each command's logic lives in
 * its own module, imported when the command runs, so `sluice --help` loads commander and
 * nothing else (no runtime, no AWS SDK, no CDK). Errors print one line naming the flag,
 * what was expected and what was received, and exit 1.
 */
import { Command, Option } from 'commander';
import { ConfigError } from '../errors.ts';
import { addTargetOptions, registerCheckpointCommands } from './checkpoint-commands.ts';
import { addRejectPolicyOptions, EXIT, outcomeCode, type RejectPolicy } from './exit-codes.ts';
import { errorJson, examples, JSON_FLAG, packageVersion, printJson, strictParsing, wantsJson } from './program.ts';
import { type Target, TARGETS } from './targets.ts';

const collect = (value: string, previous: string[] = []) => [...previous, value];

async function fail(command: string, err: unknown): Promise<never> {
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`sluice ${command}: ${message}\n`);
  if (wantsJson()) process.stdout.write(errorJson('error', err) + '\n');
  const { SluiceError } = await import('../errors.ts');
  if (!(err instanceof SluiceError) && process.env.SLUICE_DEBUG) process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(EXIT.error);
}

/** Runs an action; any error becomes a one-line message and exit code 1. */
function action<A extends unknown[]>(command: string, fn: (...args: A) => Promise<void>) {
  return async (...args: A) => {
    try {
      // The crash soak's kills (bench/soak.ts): a real SIGKILL at a named fault site.
      if (process.env.SLUICE_KILL_AT || process.env.SLUICE_FAULT_COUNTS) await armFaultSites(process.env);
      await fn(...args);
    } catch (err) {
      await fail(command, err);
    }
  };
}

/** SLUICE_KILL_AT=<point>#<n>: SIGKILL at that crossing; SLUICE_FAULT_COUNTS=<file>: each point's crossings, written at exit. */
async function armFaultSites(env: NodeJS.ProcessEnv): Promise<void> {
  const sites = await import('../util/fault-sites.ts');
  if (env.SLUICE_KILL_AT) sites.armKill(sites.parseKillSpec(env.SLUICE_KILL_AT));
  const file = env.SLUICE_FAULT_COUNTS;
  if (!file) return;
  const { writeFileSync } = await import('node:fs');
  sites.countCrossings(true);
  process.on('exit', () => writeFileSync(file, JSON.stringify(Object.fromEntries(sites.faultCrossings()))));
}

function targetOption(): Option {
  return new Option(
    '--target <target>',
    'where the job runs: embedded (one process), local-aws (the Lambda handlers against local servers), or assembly (the synthesized bundles and IAM policies of `sluice synth`, against local servers)',
  )
    .choices(TARGETS)
    .default('embedded');
}

/** Flags shared by synth, deploy and destroy: what the generated CDK app is built from. */
function deployOptions(cmd: Command): Command {
  return cmd
    .argument('<job>', 'job module (.ts, .mts, .js or .mjs); default export: a Job or (params) => Job')
    .option('--output <dir>', 'where the cloud assembly goes', 'cdk.out')
    .option('--stack-name <name>', 'CloudFormation stack name (default Sluice-<job>; another name scopes queue and table names by it)')
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--parallelism <P|operator=P>', 'deploy at parallelism P (operators without their own), or one operator at P; repeatable (SluiceJob parallelism)', collect, [])
    .addOption(new Option('--endpoint <kind>', 'ingestion endpoint: an HTTP API, or a Lambda Function URL (LocalStack)').choices(['httpApi', 'functionUrl']).default('httpApi'))
    .addOption(new Option('--removal-policy <policy>', 'of the table, buckets and log groups when the stack is deleted').choices(['retain', 'destroy']).default('retain'))
    .option('--queue-prefix <prefix>', 'prefix of queue and table names (default: see --stack-name)')
    .option('--no-checkpoints', 'deploy without the checkpoint state machine')
    .option('--no-nag', "skip cdk-nag's AwsSolutions checks");
}

const program = new Command('sluice')
  .description('Sluice: Flink-style stream processing, serverless on AWS or in one process')
  .version(packageVersion(), '-V, --version', 'print the version')
  .showHelpAfterError('(add --help for usage)')
  .addHelpText('after', examples('sluice run examples/nexmark/q5.ts --input events.jsonl --output q5.jsonl', 'sluice dev examples/first-job.ts --port 8080', 'sluice demo --query q8', 'sluice run --help'));

const run = program
  .command('run')
  .description('run a job over a bounded JSON-lines file and write one sink to a JSON-lines file')
  .argument('<job>', 'job module (.ts, .mts, .js or .mjs); default export: a Job or (params) => Job')
  .requiredOption('--input <file>', 'JSON-lines input for the ingestion source')
  .requiredOption('--output <file>', 'JSON-lines file for the sink')
  .option('--source <name>', 'source to read --input (default: the only ingestion source)')
  .option('--sink <name>', 'sink to write to --output (default: the only sink)')
  .option('--param <key=value>', 'job parameter, repeatable (numbers and true/false are converted)', collect, [])
  .option('--dead-letters <file>', 'write rejected input lines and dead letters as JSON lines')
  .option('--parallelism <P|operator=P>', 'run at parallelism P (operators without their own), or one operator at P; repeatable. From a savepoint (restore --from) state moves by key group', collect, [])
  .addOption(targetOption())
  .option('--assembly <dir>', 'assembly: a cloud assembly `sluice synth` wrote (default: synthesize one into a temporary directory)')
  .option('--stack-name <name>', 'assembly: the stack to run (default: the only one)')
  .option('--dashboard [port]', 'serve the web dashboard on loopback while the run lasts (default any free port; its URL is printed)')
  .option(...JSON_FLAG);
addRejectPolicyOptions(run).action(
  action('run', async (job: string, opts: { input: string; output: string; source?: string; sink?: string; param: string[]; deadLetters?: string; target: Target; assembly?: string; stackName?: string; dashboard?: true | string; json?: boolean } & RejectPolicy) => {
    const s = await (await import('./run.ts')).runCommand(job, opts);
    if (opts.json) printJson(s);
    process.exitCode = outcomeCode({ rejected: s.rejectedInputs, deadLetters: s.deadLetters }, opts);
  }),
);

const dev = program
  .command('dev')
  .description(
    'run a job on the embedded runtime with its HTTP ingestion endpoint, a web dashboard at / on the same port, and a live view on stderr ' +
      "(redrawn in place in a terminal, a line every few seconds otherwise; stdout is left to the job's stdout sinks)",
  )
  .argument('<job>', 'job module (.ts, .mts, .js or .mjs)')
  .option('--port <port>', 'ingestion endpoint port (0 = any free port)', '8080')
  .option('--host <host>', 'interface to listen on', '127.0.0.1')
  .option('--max-queued <records>', 'answer 429 to a request that would take a stream past this many accepted, unprocessed records', '100000')
  .option('--max-lag <ms>', "answer 429 while a stream's oldest accepted, unprocessed event is this old", '10000')
  .option('--param <key=value>', 'job parameter, repeatable', collect, [])
  .option('--parallelism <P|operator=P>', 'run at parallelism P (operators without their own), or one operator at P; repeatable. From a savepoint (restore --from) state moves by key group', collect, [])
  .addOption(new Option('--target <target>', 'where the job runs: embedded, or local-aws (the real Lambda handlers against local servers)').choices(['embedded', 'local-aws']).default('embedded'))
  .option('--metrics <file>', 'write the counters (records in, rejections, dead letters, late records dropped per stage and operator) as CloudWatch embedded metric format lines, the names the AWS handlers publish')
  .option('--json', "at the stop, print the summary as one JSON object, the last line on stdout (the job's stdout sinks write there too)");
addRejectPolicyOptions(dev).action(
  action('dev', async (job: string, opts: { port: string; host: string; maxQueued: string; maxLag: string; param: string[]; target: Target; metrics?: string; json?: boolean } & RejectPolicy) => {
    const { devCommand, devExitCode } = await import('./dev.ts');
    const s = await devCommand(job, opts);
    if (opts.json) printJson(s);
    process.exit(devExitCode(s, opts));
  }),
);

const publish = program
  .command('publish')
  .description('publish a JSON-lines file to an ingestion stream (`sluice dev`, or a deployed endpoint: signed with SigV4 from the AWS credential chain)')
  .argument('<stream>', 'ingestion stream name')
  .argument('<file>', 'JSON-lines file, one event per line')
  .option('--url <url>', 'ingestion endpoint (the EndpointUrl output of `sluice deploy`)', 'http://127.0.0.1:8080')
  .option('--batch-size <n>', 'events per request', '500')
  .addOption(new Option('--sign <mode>', 'SigV4: auto (AWS endpoints, or with --service), always, never').choices(['auto', 'always', 'never']).default('auto'))
  .option('--region <region>', 'signing region (default: from the URL, else AWS_REGION)')
  .option('--service <service>', 'signing service: execute-api (HTTP API) or lambda (Function URL); default: from the URL')
  .option(...JSON_FLAG);
addRejectPolicyOptions(publish, false).action(
  action('publish', async (stream: string, file: string, opts: { url: string; batchSize: string; sign: 'auto' | 'always' | 'never'; region?: string; service?: string; json?: boolean } & RejectPolicy) => {
    const r = await (await import('./publish-command.ts')).publishCommand(stream, file, opts);
    if (opts.json) printJson({ stream, file, url: opts.url, sent: r.sent, accepted: r.accepted, rejected: r.rejected });
    process.exitCode = outcomeCode({ rejected: r.rejected.length, deadLetters: 0 }, opts);
  }),
);

deployOptions(program.command('synth').description('synthesize the CloudFormation template and Lambda bundles of a job, offline (cdk-nag on)'))
  .option(...JSON_FLAG)
  .action(
    action('synth', async (job: string, opts: Record<string, unknown>) => {
      const s = await (await import('./deploy.ts')).synthCommand(job, opts);
      if (opts.json) printJson({ job: s.job.name, stackName: s.stackName, outdir: s.outdir, templateFile: s.templateFile, functions: s.functions, streams: s.streams });
    }),
  );

deployOptions(program.command('deploy').description('deploy a job to AWS (or LocalStack, with AWS_ENDPOINT_URL) with the AWS CDK CLI, then print its endpoint, table, bucket, DLQs and dashboard'))
  .addOption(new Option('--require-approval <level>', "the CDK CLI's approval of security changes").choices(['never', 'any-change', 'broadening']).default('broadening'))
  .option(...JSON_FLAG)
  .action(
    action('deploy', async (job: string, opts: Record<string, unknown>) => {
      const r = await (await import('./deploy.ts')).deployCommand(job, opts);
      if (opts.json) printJson(r);
    }),
  );

deployOptions(program.command('destroy').description("delete a job's stack (the table, buckets and log groups stay unless it was deployed with --removal-policy destroy)"))
  .option('--force', 'do not ask for confirmation')
  .option(...JSON_FLAG)
  .action(
    action('destroy', async (job: string, opts: Record<string, unknown>) => {
      const r = await (await import('./deploy.ts')).destroyCommand(job, opts);
      if (opts.json) printJson(r);
    }),
  );

program
  .command('demo')
  .description('a Nexmark query (default Q5) on the embedded runtime, fed by the Nexmark generator (what `npm start` runs)')
  .option('--duration <seconds>', 'how long to run', '20')
  .option('--events-per-second <n>', 'generator rate', '50000')
  .addOption(new Option('--query <name>', 'Nexmark query of examples/nexmark: q0, q1, q2, q3, q4, q5, q7, q8 or q11').default('q5'))
  .option('--json', 'print the summary as one JSON object on stdout (the results then go to stderr)')
  .action(
    action('demo', async (opts: { duration: string; eventsPerSecond: string; query: string; json?: boolean }) => {
      const s = await (await import('./demo.ts')).demoCommand(opts);
      if (opts.json) printJson(s);
    }),
  );

addTargetOptions(
  program
    .command('status')
    .description("what a job is doing: under `sluice dev`, its live numbers (records, rejections, dead letters, late drops, queues, watermarks, checkpoints; --json: the GET /stats body the dashboard draws); with --target local-aws|aws, its stage queues, dead-letter queues, checkpoints and coordinator, and each stage's true rate and the partitions advised (aws: from CloudWatch, with the maximum concurrency; local-aws: from what the run recorded in its checkpoint directory)")
    .argument('<job>', 'job module (.ts, .mts, .js or .mjs)')
    .option('--checkpoint-dir <dir>', "the dev process's (or local-aws run's) checkpoint directory (default .sluice/<job>/)")
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--target-rate <records/s>', 'the partitions each stage needs at this source rate, from its true rate (default: the current input rate)')
    .option('--window <minutes>', "aws: the minutes of CloudWatch metrics the stages' rates are measured over (default 15)")
    .option('--apply', 'aws: carry out the advice: rescale each stage after the sources whose partitions differ (one savepoint and restart each), raise maximum concurrencies that fall short')
    .option(...JSON_FLAG),
).action(
  action('status', async (job: string, opts: { checkpointDir?: string; param: string[]; targetRate?: string; window?: string; apply?: boolean; json?: boolean; target: 'embedded' | 'local-aws' | 'aws' }) => {
    const log = (l: string) => process.stderr.write(l + '\n');
    if (opts.target === 'embedded' && (opts.window !== undefined || opts.apply)) throw new ConfigError(opts.apply ? '--apply' : '--window', 'only with --target aws (it reads CloudWatch; a dev process measures its own rates)', '--target embedded');
    const s =
      opts.target === 'embedded'
        ? await (await import('./status.ts')).statusCommand(job, opts, log)
        : await (await import('./status-aws.ts')).awsStatusCommand(job, { ...opts, target: opts.target }, log);
    if (opts.json) printJson(s);
  }),
);

const STATE_GET_EXAMPLES = [
  'sluice state get jobs/orders.ts per-customer c42',
  'sluice state get jobs/orders.ts per-customer c42 --from before-upgrade --json',
  'sluice state get jobs/orders.ts per-customer 17 --checkpoint-dir /var/lib/orders --from 12',
  'sluice state get jobs/orders.ts per-customer c42 --target aws --json',
];
const stateGet = program
  .command('state')
  .description("read a job's keyed state from its checkpoints (embedded, a local-AWS run's, or the deployed job's)")
  .addHelpText('after', examples(...STATE_GET_EXAMPLES))
  .command('get')
  .description("one key's state in an operator, as the latest checkpoint (or --from a checkpoint or savepoint) holds it; --target local-aws|aws reads a local-AWS run's or the deployed job's checkpoints")
  .argument('<job>', 'job module (.ts, .mts, .js or .mjs)')
  .argument('<operator>', 'the keyed operator (its .name())')
  .argument('<key>', 'the key (a number when it reads as one and no string key matches)')
  .option('--checkpoint-dir <dir>', 'default .sluice/<job>/')
  .option('--from <checkpoint|savepoint>', "a retained checkpoint's epoch or a savepoint label (default: the latest checkpoint)")
  .option('--param <key=value>', 'job parameter, repeatable', collect, [])
  .option(...JSON_FLAG)
  .addHelpText('after', examples(...STATE_GET_EXAMPLES));
addTargetOptions(stateGet).action(
  action('state get', async (job: string, operator: string, key: string, opts: { checkpointDir?: string; from?: string; param: string[]; json?: boolean; target: 'embedded' | 'local-aws' | 'aws' }) => {
    const r = await (await import('./state-get.ts')).stateGetCommand(job, operator, key, opts, (l) => process.stderr.write(l + '\n'));
    if (opts.json) printJson(r);
  }),
);

// Checkpoint flags on run and dev; the checkpoints, savepoint and restore commands.
registerCheckpointCommands(program, action);

/** Each command's --help ends with these (test/cli/help.test.ts checks every command has some). */
const EXAMPLES: Record<string, string[]> = {
  run: [
    'sluice run examples/nexmark/q5.ts --input events.jsonl --output q5.jsonl',
    'sluice run jobs/orders.ts --input orders.jsonl --output alerts.jsonl --param threshold=100 --dead-letters rejected.jsonl',
    'sluice run jobs/orders.ts --input orders.jsonl --output alerts.jsonl --json > summary.json',
    'sluice run jobs/orders.ts --input orders.jsonl --output alerts.jsonl --checkpoint-interval 1000 --resume',
    'sluice run jobs/orders.ts --input orders.jsonl --output alerts.jsonl --target local-aws',
    'sluice run jobs/orders.ts --input big.jsonl --output alerts.jsonl --dashboard 8090',
  ],
  dev: ['sluice dev examples/first-job.ts --port 8080', 'sluice dev jobs/orders.ts --port 0 --checkpoint-interval 5000', 'sluice dev jobs/orders.ts --resume', 'sluice dev jobs/orders.ts --parallelism 4 --parallelism per-customer=8'],
  publish: ['sluice publish views views.jsonl --url http://127.0.0.1:8080', 'sluice publish orders orders.jsonl --url https://abc123.execute-api.eu-west-1.amazonaws.com --json'],
  synth: ['sluice synth jobs/orders.ts', 'sluice synth jobs/orders.ts --output cdk.out --stack-name Orders-Staging --json'],
  deploy: ['sluice deploy jobs/orders.ts', 'sluice deploy jobs/orders.ts --require-approval never --json > deployed.json', 'AWS_ENDPOINT_URL=http://localhost:4566 sluice deploy jobs/orders.ts --endpoint functionUrl --removal-policy destroy'],
  destroy: ['sluice destroy jobs/orders.ts', 'sluice destroy jobs/orders.ts --stack-name Orders-Staging --force', 'sluice destroy jobs/orders.ts --force --json'],
  demo: ['sluice demo', 'sluice demo --query q8 --duration 10 --events-per-second 20000', 'sluice demo --duration 5 --json'],
  status: ['sluice status examples/first-job.ts', 'sluice status jobs/orders.ts --checkpoint-dir /var/lib/orders --json', 'sluice status jobs/orders.ts --target-rate 50000', 'sluice status jobs/orders.ts --target aws'],
  checkpoints: ['sluice checkpoints jobs/orders.ts', 'sluice checkpoints jobs/orders.ts --checkpoint-dir /var/lib/orders --json', 'sluice checkpoints jobs/orders.ts --target aws'],
  savepoint: ['sluice savepoint jobs/orders.ts --label before-upgrade', 'sluice savepoint jobs/orders.ts --checkpoint-dir /var/lib/orders --json', 'sluice savepoint jobs/orders.ts --target aws --label v2'],
  restore: [
    'sluice restore jobs/orders.ts --from before-upgrade',
    'sluice restore jobs/orders.ts --from 12 --input orders.jsonl --output alerts.jsonl',
    'sluice restore jobs/orders.ts --target aws --from before-upgrade',
    'sluice restore jobs/orders.ts --from before-upgrade --parallelism 4 --input orders.jsonl --output alerts.jsonl',
  ],
  rescale: [
    'sluice rescale jobs/orders.ts --target aws --stage per-customer --partitions 8',
    'sluice rescale jobs/orders.ts --target aws --stage 1 --partitions 8 --from rescale-2026-12-03T10-00-00-000Z',
    'sluice rescale jobs/orders.ts --target local-aws --checkpoint-dir .sluice/orders --stage 1 --partitions 4',
  ],
};
for (const cmd of program.commands) {
  const lines = EXAMPLES[cmd.name()];
  if (lines) cmd.addHelpText('after', examples(...lines));
}
strictParsing(program);

await program.parseAsync(process.argv);
