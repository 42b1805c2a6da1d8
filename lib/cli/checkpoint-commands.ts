/**
 * Wiring of the checkpoint flags and commands into the `sluice` program (main.ts calls
 * registerCheckpointCommands once): flags on `run` and `dev`, and the `checkpoints`,
 * `savepoint` and `restore` commands. The logic lives in checkpoints.ts (embedded) and
 * checkpoints-aws.ts (`--target local-aws|aws`), each loaded only when its command runs.
 */
import { type Command, Option } from 'commander';
import { ConfigError } from '../errors.ts';
import { addRejectPolicyOptions, outcomeCode, type RejectPolicy } from './exit-codes.ts';
import { JSON_FLAG, printJson } from './program.ts';

type Action = <A extends unknown[]>(command: string, fn: (...args: A) => Promise<void>) => (...args: A) => Promise<void>;

const collect = (value: string, previous: string[] = []) => [...previous, value];

const CHECKPOINT_TARGETS = ['embedded', 'local-aws', 'aws'] as const;
type CheckpointTarget = (typeof CHECKPOINT_TARGETS)[number];

interface AwsFlags {
  target: CheckpointTarget;
  table?: string;
  bucket?: string;
  stateMachine?: string;
  queuePrefix?: string;
}

/** --target and what --target aws cannot derive from the job's name. */
export function addTargetOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--target <target>', "embedded (the checkpoint directory), local-aws (a `sluice run --target local-aws` run's servers, from AWS_ENDPOINT_URL*), or aws (the deployed job)")
        .choices(CHECKPOINT_TARGETS)
        .default('embedded'),
    )
    .option('--table <name>', "aws: the state table (default: SLUICE_TABLE of the job's stage functions)")
    .option('--bucket <name>', "aws: the snapshot bucket (default: SLUICE_BUCKET of the job's stage functions)")
    .option('--state-machine <arn>', "aws: the checkpoint state machine (default: SLUICE_STATE_MACHINE_ARN of the job's stage functions)")
    .option('--queue-prefix <prefix>', 'aws: the stage queues\' name prefix (default none)');
}

/** The checkpoint flags of `run` (and `restore`). */
export function addRunCheckpointOptions(cmd: Command): Command {
  return cmd
    .option('--checkpoint-interval <ms>', 'take a checkpoint every <ms> while input arrives (default: off; the output then shows only committed epochs)')
    .option('--checkpoint-dir <dir>', 'checkpoints, logs and savepoints (default .sluice/<job>/)')
    .option('--crash-after <records>', 'testing: kill the process abruptly (exit 137, no cleanup) after <records> input records (needs --checkpoint-interval; on local-aws, once a checkpoint of this run has also completed)')
    .option('--resume', 'continue from the last completed checkpoint (after a crash), over the same --input: a file whose content changed is refused; with no checkpoint yet, says so and starts from the beginning of --input')
    .option('--retain-checkpoints <n>', 'completed checkpoints kept restorable with their logs (default 1)');
}

/** The checkpoint flags of `dev`. */
export function addDevCheckpointOptions(cmd: Command): Command {
  return cmd
    .option('--checkpoint-interval <ms>', 'checkpoint every <ms> while input arrives (default 10000; 0: only at a stop, and savepoints)')
    .option('--checkpoint-dir <dir>', 'checkpoints, logs and savepoints (default .sluice/<job>/)')
    .option('--resume', 'continue from the last completed checkpoint and replay the events accepted after it (all logged events when none completed)')
    .option('--retain-checkpoints <n>', 'completed checkpoints kept restorable with their logs (default 1)');
}

// Each command's module is loaded when it runs, so `sluice --help` loads none of them.
const awsCommands = () => import('./checkpoints-aws.ts');
const embeddedCommands = () => import('./checkpoints.ts');
const err = (l: string) => process.stderr.write(l + '\n');

export function registerCheckpointCommands(program: Command, action: Action): void {
  const byName = (n: string) => program.commands.find((c) => c.name() === n);
  const run = byName('run');
  if (run) addRunCheckpointOptions(run);
  const dev = byName('dev');
  if (dev) addDevCheckpointOptions(dev);

  const checkpoints = program
    .command('checkpoints')
    .description("list a job's retained checkpoints (epoch, time, size, duration) and savepoints")
    .argument('<job>', 'job module (.ts or .js)')
    .option('--checkpoint-dir <dir>', 'default .sluice/<job>/')
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--json', 'print JSON');
  addTargetOptions(checkpoints).action(
    action('checkpoints', async (job: string, opts: { checkpointDir?: string; param: string[]; json?: boolean } & AwsFlags) => {
      const out = (l: string) => process.stdout.write(l + '\n');
      if (opts.target === 'embedded') await (await embeddedCommands()).checkpointsCommand(job, opts, out);
      else await (await awsCommands()).checkpointsAwsCommand(job, { ...opts, target: opts.target }, out);
    }),
  );

  const savepoint = program
    .command('savepoint')
    .description('take a savepoint (of a job running under `sluice dev`, a local-aws run or a deployed job) and wait until it is written')
    .argument('<job>', 'job module (.ts or .js)')
    .option('--label <label>', 'savepoint name (default sp-<time>)')
    .option('--checkpoint-dir <dir>', 'default .sluice/<job>/')
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--timeout <ms>', 'how long to wait', '120000')
    .option(...JSON_FLAG);
  addTargetOptions(savepoint).action(
    action('savepoint', async (job: string, opts: { label?: string; checkpointDir?: string; param: string[]; timeout: string; json?: boolean } & AwsFlags) => {
      const r = opts.target === 'embedded' ? await (await embeddedCommands()).savepointCommand(job, opts, err) : await (await awsCommands()).savepointAwsCommand(job, { ...opts, target: opts.target }, err);
      if (opts.json) printJson(r);
    }),
  );

  const restore = program
    .command('restore')
    .description('start a job from a checkpoint or savepoint: a bounded run with --input/--output, otherwise `dev`')
    .argument('<job>', 'job module (.ts or .js)')
    .requiredOption('--from <checkpoint|savepoint>', "a retained checkpoint's epoch, a savepoint label, or a savepoint directory")
    .option('--input <file>', 'JSON-lines input: run to the end of it (as `sluice run`)')
    .option('--output <file>', 'JSON-lines output (with --input)')
    .option('--source <name>', 'source to read --input')
    .option('--sink <name>', 'sink to write to --output')
    .option('--dead-letters <file>', 'write rejected input lines and dead letters as JSON lines')
    .option('--port <port>', 'dev: ingestion endpoint port', '8080')
    .option('--host <host>', 'dev: interface to listen on', '127.0.0.1')
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--parallelism <P|operator=P>', 'restore at parallelism P (operators without their own), or one operator at P; repeatable: state and timers move by key group (embedded)', collect, [])
    .option('--json', 'print the result as one JSON object on stdout: the `run` shape with --input, the `dev` shape at the stop otherwise, or what was restored (local-aws, aws)');
  addRejectPolicyOptions(addTargetOptions(addDevCheckpointOptions(restore))).action(
    action('restore', async (job: string, opts: { from: string; input?: string; output?: string; param: string[]; port: string; host: string; json?: boolean } & AwsFlags & RejectPolicy) => {
      if (opts.target !== 'embedded') {
        const p = (opts as { parallelism?: string[] }).parallelism;
        if (p?.length) throw new ConfigError('--parallelism', `nothing with --target ${opts.target} (a restore keeps the partitions the job runs at; to change them: sluice rescale <job> --target ${opts.target} --stage S --partitions P)`, JSON.stringify(p.join(' ')));
        if (opts.input !== undefined || opts.output !== undefined) throw new ConfigError(opts.input !== undefined ? '--input' : '--output', `no --input/--output with --target ${opts.target} (the job restores in place and keeps consuming its queues)`, 'given');
        const r = await (await awsCommands()).restoreAwsCommand(job, { ...opts, target: opts.target }, err);
        if (opts.json) printJson(r);
        return;
      }
      if (opts.input !== undefined || opts.output !== undefined) {
        if (opts.input === undefined || opts.output === undefined) throw new ConfigError(opts.input === undefined ? '--input' : '--output', '--input and --output together (a bounded run), or neither (dev)', 'only one of them');
        const s = await (await import('./run.ts')).runCommand(job, { ...opts, target: 'embedded', input: opts.input, output: opts.output, checkpointInterval: (opts as { checkpointInterval?: string }).checkpointInterval ?? '0' });
        if (opts.json) printJson(s);
        process.exitCode = outcomeCode({ rejected: s.rejectedInputs, deadLetters: s.deadLetters }, opts);
        return;
      }
      const { devCommand, devExitCode } = await import('./dev.ts');
      const s = await devCommand(job, { ...opts, target: 'embedded' });
      if (opts.json) printJson(s);
      process.exit(devExitCode(s, opts));
    }),
  );

  const rescale = program
    .command('rescale')
    .description('run one stage of a local-aws run or a deployed job at another number of partitions: savepoint, stop, restore its state by key group, start')
    .argument('<job>', 'job module (.ts or .js)')
    .requiredOption('--stage <stage>', 'the stage, by id or name (as sluice status shows them); not a source stage')
    .requiredOption('--partitions <P>', 'its partitions from now on (1 to the job\'s maxParallelism)')
    .option('--from <savepoint>', 'restore this savepoint (default: a new one on aws; the last committed checkpoint on local-aws); after a rescale that died, the one it printed')
    .option('--label <label>', 'aws: the new savepoint\'s label (default rescale-<time>)')
    .option('--max-concurrency <n>', "aws: the stage's event source maximum concurrency (default min(max(2, P), 10))")
    .option('--checkpoint-dir <dir>', 'local-aws: the run\'s checkpoint directory (default .sluice/<job>/)')
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--timeout <ms>', 'aws: how long to wait for the savepoint', '300000')
    .option(...JSON_FLAG);
  addTargetOptions(rescale).action(
    action('rescale', async (job: string, opts: { stage: string; partitions: string; from?: string; label?: string; maxConcurrency?: string; checkpointDir?: string; param: string[]; timeout: string; json?: boolean } & AwsFlags) => {
      if (opts.target === 'embedded') {
        throw new ConfigError('--target', 'local-aws or aws (an embedded job rescales through a savepoint: sluice savepoint, then sluice restore --from <label> --parallelism)', 'embedded');
      }
      const r = await (await import('./rescale.ts')).rescaleCommand(job, { ...opts, target: opts.target }, err);
      if (opts.json) printJson(r);
    }),
  );
}
