/**
 * Nexmark event model (nexmark-ts v1, NEXMARK.md section 2). Field order in
 * each interface is the wire order of section 2.4; `serializeEvent` relies on it.
 * All longs fit exactly in a JS number (ids < 2^53, prices <= 2e8, epoch ms).
 */

export interface Person {
  type: 'person';
  id: number;
  name: string;
  emailAddress: string;
  creditCard: string;
  city: string;
  state: string;
  dateTime: number;
  extra: string;
}

export interface Auction {
  type: 'auction';
  id: number;
  itemName: string;
  description: string;
  initialBid: number;
  reserve: number;
  dateTime: number;
  expires: number;
  seller: number;
  category: number;
  extra: string;
}

export interface Bid {
  type: 'bid';
  auction: number;
  bidder: number;
  price: number;
  channel: string;
  url: string;
  dateTime: number;
  extra: string;
}

export type NexmarkEvent = Person | Auction | Bid;
export type NexmarkEventType = NexmarkEvent['type'];
