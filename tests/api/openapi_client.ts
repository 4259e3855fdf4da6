// What a TypeScript client writes against the types openapi-typescript generates from openapi.yaml
// (as ./raftlog.ts, beside this file): tests/api/test_openapi.py checks it with `tsc --strict`.
// Appends (one, a batch), reads (one entry, a range), the members list and adding a member; each
// `@ts-expect-error` is a mistake the types must refuse, so loose types (`any`, `unknown`) fail too.
import type { paths } from "./raftlog";

type Json<Message> = Message extends { content: { "application/json": infer Body } } ? Body : never;

type AppendOne = paths["/v1/entries"]["post"];
type AppendBatch = paths["/v1/entries/batch"]["post"];
type GetEntry = paths["/v1/entries/{index}"]["get"];
type ReadEntries = paths["/v1/entries"]["get"];
type ListMembers = paths["/v1/cluster/members"]["get"];
type AddMember = paths["/v1/cluster/members"]["post"];

export const entry: Json<AppendOne["requestBody"]> = { body: "hello", encoding: "utf-8" };
// @ts-expect-error an entry has a body
export const noBody: Json<AppendOne["requestBody"]> = { encoding: "utf-8" };
export const rawEntry: AppendOne["requestBody"]["content"]["application/octet-stream"] = "hello";

export const batch: Json<AppendBatch["requestBody"]> = {
    entries: [{ body: "a", encoding: "utf-8" }, { body: "Yg==", encoding: "base64" }],
};
// @ts-expect-error an encoding is utf-8 or base64
export const badEncoding: Json<AppendBatch["requestBody"]> = { entries: [{ body: "a", encoding: "hex" }] };

export const one: GetEntry["parameters"]["path"] = { index: 42 };
// @ts-expect-error an index is a number
export const textIndex: GetEntry["parameters"]["path"] = { index: "42" };
export const range: ReadEntries["parameters"]["query"] = { start: 42, limit: 10, consistency: "local" };
// @ts-expect-error a read is linearizable or local
export const badConsistency: ReadEntries["parameters"]["query"] = { consistency: "strong" };

// openapi-typescript types a field with a default as required (its defaultNonNullable option), so
// these bodies spell out every field
export const learner: Json<AddMember["requestBody"]> = {
    id: "n4", peer_address: "127.0.0.1:9004", client_url: "http://127.0.0.1:8004", grpc_address: null, learner: true,
};
// @ts-expect-error a member has a peer address
export const noAddress: Json<AddMember["requestBody"]> = { id: "n5", client_url: null, grpc_address: null, learner: true };
// @ts-expect-error a member has no other fields
export const extraField: Json<AddMember["requestBody"]> = { ...learner, id: "n5", role: "voter" };

export function appendedAt(answer: Json<AppendOne["responses"][201]>): [number, number] {
    return [answer.index, answer.pos];
}

export function batchIndexes(answer: Json<AppendBatch["responses"][201]>): number[] {
    return answer.positions.map((_, i) => answer.first_index + i).concat(answer.last_index);
}

export function bodyOf(answer: Json<GetEntry["responses"][200]>): string {
    return answer.encoding === "utf-8" ? answer.body : `base64:${answer.body}`;
}

export function nextRead(answer: Json<ReadEntries["responses"][200]>): ReadEntries["parameters"]["query"] {
    return { start: answer.next, limit: answer.entries.length };
}

export function learners(answer: Json<ListMembers["responses"][200]>): string[] {
    return answer.members.filter((member) => !member.voter).map((member) => member.id);
}

export function refusal(answer: Json<AddMember["responses"][409]>): string {
    return answer.error.code;
}

export function addedAt(answer: Json<AddMember["responses"][201]>): number {
    return answer.committed ? answer.index : -1;
}

// Topics: create one, append by key, read a queue (a page, filtered by tag), a consumer group's commit
type CreateTopic = paths["/v1/topics"]["post"];
type AppendMessages = paths["/v1/topics/{name}/messages"]["post"];
type ReadQueue = paths["/v1/topics/{name}/queues/{queue}/messages"]["get"];
type CommitOffsets = paths["/v1/groups/{group}/offsets"]["post"];

export const topic: Json<CreateTopic["requestBody"]> = {
    name: "orders", queues: 8, max_message_bytes: null, readable: true, writable: true, description: "",
};
// @ts-expect-error a topic has a queue count
export const noQueues: Json<CreateTopic["requestBody"]> = { name: "orders" };

export const messages: Json<AppendMessages["requestBody"]> = {
    messages: [{ body: "order 7", encoding: "utf-8", keys: ["customer-42"], tags: ["paid"], properties: {} }],
    queue: null, split: false,
};
// @ts-expect-error a message's keys are strings
export const numericKey: Json<AppendMessages["requestBody"]> = { messages: [{ body: "x", keys: [42] }] };

export const queueRead: ReadQueue["parameters"]["query"] = { offset: 0, tag: ["paid"], consistency: "local" };
export const queuePath: ReadQueue["parameters"]["path"] = { name: "orders", queue: 5 };

export function offsetsOf(answer: Json<AppendMessages["responses"][201]>): number[] {
    return answer.messages.flatMap((message) => ("queue_offset" in message ? [message.queue_offset] : []));
}

export function nextOffset(answer: Json<ReadQueue["responses"][200]>): number {
    return answer.next_offset;
}

export const commit: Json<CommitOffsets["requestBody"]> = {
    topic: "orders", queues: [{ queue: 5, offset: 2, expected: 1 }],
};
// @ts-expect-error a commit names its topic
export const noTopic: Json<CommitOffsets["requestBody"]> = { queues: [{ queue: 5, offset: 2, expected: null }] };
