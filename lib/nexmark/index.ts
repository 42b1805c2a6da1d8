export type { Auction, Bid, NexmarkEvent, NexmarkEventType, Person } from './model.ts';
export { Rng, fmix32 } from './random.ts';
export {
  DEFAULT_BASE_TIME,
  DEFAULT_RATE_PER_SEC,
  DEFAULT_SEED,
  eventType,
  generateEvent,
  generateEvents,
  lastAuction,
  lastPerson,
  serializeEvent,
  timestamp,
  type NexmarkConfig,
} from './generator.ts';
