/** A job with an S3 file sink for the assembly tests: the bids of a Nexmark stream, as {auction, price}. */
import { AwsSinks } from '../../../lib/aws/index.ts';
import { Job, WatermarkStrategies } from '../../../lib/index.ts';

interface Event {
  readonly type: string;
  readonly dateTime: number;
  readonly auction?: number;
  readonly price?: number;
}

const job = new Job('assembly-s3-demo', { parallelism: 2 });
job
  .ingest<Event>('events', { timestamp: (e) => e.dateTime, watermark: WatermarkStrategies.boundedOutOfOrderness(1000) })
  .filter((e) => e.type === 'bid')
  .map((e) => ({ auction: e.auction, price: e.price }))
  .sinkTo(AwsSinks.s3Files({ prefix: 'bids' }), 'files');

export default job;
