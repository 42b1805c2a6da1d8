/**
 * Wiring of the checkpoint flags and commands into the `sluice` program (main.ts calls
 * registerCheckpointCommands once): flags on `run` and `dev`, and the `checkpoints`,
 * `savepoint` and `restore` commands. The logic lives in checkpoints.ts.
 */
import type { Command } from 'commander';
import { ConfigError } from '../errors.ts';
import { addDevCheckpointOptions, addRunCheckpointOptions, checkpointsCommand, savepointCommand } from './checkpoints.ts';
import { devCommand } from './dev.ts';
import { runCommand } from './run.ts';

type Action = <A extends unknown[]>(command: string, fn: (...args: A) => Promise<void>) => (...args: A) => Promise<void>;

const collect = (value: string, previous: string[] = []) => [...previous, value];
const err = (l: string) => process.stderr.write(l + '\n');

export function registerCheckpointCommands(program: Command, action: Action): void {
  const byName = (n: string) => program.commands.find((c) => c.name() === n);
  const run = byName('run');
  if (run) addRunCheckpointOptions(run);
  const dev = byName('dev');
  if (dev) addDevCheckpointOptions(dev);

  program
    .command('checkpoints')
    .description("list a job's retained checkpoints (epoch, time, size, duration) and savepoints")
    .argument('<job>', 'job module (.ts or .js)')
    .option('--checkpoint-dir <dir>', 'default .sluice/<job>/')
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--json', 'print JSON')
    .action(
      action('checkpoints', async (job: string, opts: { checkpointDir?: string; param: string[]; json?: boolean }) => {
        await checkpointsCommand(job, opts, (l) => process.stdout.write(l + '\n'));
      }),
    );

  program
    .command('savepoint')
    .description('take a savepoint of a job running under `sluice dev` and wait until it is written')
    .argument('<job>', 'job module (.ts or .js)')
    .option('--label <label>', 'savepoint name (default sp-<time>)')
    .option('--checkpoint-dir <dir>', 'default .sluice/<job>/')
    .option('--param <key=value>', 'job parameter, repeatable', collect, [])
    .option('--timeout <ms>', 'how long to wait', '120000')
    .action(
      action('savepoint', async (job: string, opts: { label?: string; checkpointDir?: string; param: string[]; timeout: string }) => {
        await savepointCommand(job, opts, err);
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
    .option('--param <key=value>', 'job parameter, repeatable', collect, []);
  addDevCheckpointOptions(restore).action(
    action('restore', async (job: string, opts: { from: string; input?: string; output?: string; param: string[]; port: string; host: string }) => {
      if (opts.input !== undefined || opts.output !== undefined) {
        if (opts.input === undefined || opts.output === undefined) throw new ConfigError(opts.input === undefined ? '--input' : '--output', '--input and --output together (a bounded run), or neither (dev)', 'only one of them');
        await runCommand(job, { ...opts, input: opts.input, output: opts.output, checkpointInterval: (opts as { checkpointInterval?: string }).checkpointInterval ?? '0' });
        return;
      }
      await devCommand(job, opts);
      process.exit(process.exitCode ?? 0);
    }),
  );
}
