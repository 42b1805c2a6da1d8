/**
 * The `sluice` command line (bin/sluice.js runs this through tsx). Only wiring:
 * each command's logic lives in its own module. Errors print one line naming
 * the flag, what was expected and what was received, and exit 1.
 */
import { Command, Option } from 'commander';
import { SluiceError } from '../errors.ts';
import { demoCommand } from './demo.ts';
import { devCommand } from './dev.ts';
import { fmt, validateFlags } from './options.ts';
import { publishFile } from './publish.ts';
import { runCommand } from './run.ts';
import { registerCheckpointCommands } from './checkpoint-commands.ts';
import { type Target, TARGETS } from './targets.ts';
import { z } from 'zod';

const collect = (value: string, previous: string[] = []) => [...previous, value];

function fail(command: string, err: unknown): never {
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`sluice ${command}: ${message}\n`);
  if (!(err instanceof SluiceError) && process.env.SLUICE_DEBUG) process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
}

/** Runs an action; any error becomes a one-line message and exit code 1. */
function action<A extends unknown[]>(command: string, fn: (...args: A) => Promise<void>) {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      fail(command, err);
    }
  };
}

/** embedded (default): one process; local-aws: the Lambda handlers against DynamoDB Local and fauxqs, or the servers AWS_ENDPOINT_URL_* name. */
function targetOption(): Option {
  return new Option('--target <target>', 'where the job runs: embedded, or local-aws (the real Lambda handlers against local servers)').choices(TARGETS).default('embedded');
}

const program = new Command('sluice')
  .description('Sluice: Flink-style stream processing, serverless on AWS or in one process')
  .showHelpAfterError('(add --help for usage)');

program
  .command('run')
  .description('run a job over a bounded JSON-lines file and write one sink to a JSON-lines file')
  .argument('<job>', 'job module (.ts or .js); default export: a Job or (params) => Job')
  .requiredOption('--input <file>', 'JSON-lines input for the ingestion source')
  .requiredOption('--output <file>', 'JSON-lines file for the sink')
  .option('--source <name>', 'source to read --input (default: the only ingestion source)')
  .option('--sink <name>', 'sink to write to --output (default: the only sink)')
  .option('--param <key=value>', 'job parameter, repeatable (numbers and true/false are converted)', collect, [])
  .option('--dead-letters <file>', 'write rejected input lines and dead letters as JSON lines')
  .addOption(targetOption())
  .action(
    action('run', async (job: string, opts: { input: string; output: string; source?: string; sink?: string; param: string[]; deadLetters?: string; target: Target }) => {
      await runCommand(job, opts);
    }),
  );

program
  .command('dev')
  .description('run a job on the embedded runtime with its HTTP ingestion endpoint and a live table')
  .argument('<job>', 'job module (.ts or .js)')
  .option('--port <port>', 'ingestion endpoint port (0 = any free port)', '8080')
  .option('--host <host>', 'interface to listen on', '127.0.0.1')
  .option('--param <key=value>', 'job parameter, repeatable', collect, [])
  .addOption(targetOption())
  .action(
    action('dev', async (job: string, opts: { port: string; host: string; param: string[]; target: Target }) => {
      await devCommand(job, opts);
      process.exit(process.exitCode ?? 0);
    }),
  );

program
  .command('publish')
  .description('publish a JSON-lines file to an ingestion stream')
  .argument('<stream>', 'ingestion stream name')
  .argument('<file>', 'JSON-lines file, one event per line')
  .option('--url <url>', 'ingestion endpoint', 'http://127.0.0.1:8080')
  .option('--batch-size <n>', 'events per request', '500')
  .action(
    action('publish', async (stream: string, file: string, opts: { url: string; batchSize: string }) => {
      const { batchSize } = validateFlags(z.object({ batchSize: z.coerce.number().int().positive() }), opts, {
        batchSize: { flag: '--batch-size', expected: 'a positive integer' },
      });
      const result = await publishFile({ url: opts.url, stream, file, batchSize, progress: process.stderr.isTTY === true });
      const out = (l: string) => process.stderr.write(l + '\n');
      out(`published ${file} to "${stream}": ${fmt.int(result.accepted)} accepted, ${fmt.int(result.rejected.length)} rejected`);
      for (const r of result.rejected.slice(0, 10)) out(`  line ${r.line}: ${r.error}`);
      if (result.rejected.length > 10) out(`  ... and ${fmt.int(result.rejected.length - 10)} more`);
      if (result.rejected.length) process.exitCode = 1;
    }),
  );

program
  .command('demo')
  .description('Nexmark Q5 on the embedded runtime, fed by the Nexmark generator (what `npm start` runs)')
  .option('--duration <seconds>', 'how long to run', '20')
  .option('--events-per-second <n>', 'generator rate', '50000')
  .addOption(new Option('--query <name>', 'Nexmark query').default('q5'))
  .action(
    action('demo', async (opts: { duration: string; eventsPerSecond: string; query: string }) => {
      await demoCommand(opts);
    }),
  );

// Checkpoint flags on run and dev; the checkpoints, savepoint and restore commands.
registerCheckpointCommands(program, action);

await program.parseAsync(process.argv);
