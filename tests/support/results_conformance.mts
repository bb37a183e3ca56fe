// Answers results-API queries with InferenceX-app's own JSON provider
// (packages/db/src/json-provider.ts), for tests/results_api_conformance.rs.
//
// Usage: tsx results_conformance.mts <json-provider.ts> <batch.json> <answers.json>
// batch.json: [{"dir": <dump dir>, "queries": [[<DB model key>, <date>|null, <exact>], …]}, …]
// answers.json (written): one list per history, one list of rows per query.
//
// The provider keeps its tables in a module-level singleton loaded from
// DUMP_DIR on first use, so each history imports a fresh instance of the
// module (a distinct URL is a distinct ES module) after pointing DUMP_DIR at
// its dump. The app's route passes `date ?? undefined` and
// `exact || undefined`; so does this.
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const [provider, batchPath, outPath] = process.argv.slice(2);
if (!provider || !batchPath || !outPath) {
  console.error('usage: results_conformance.mts <json-provider.ts> <batch.json> <answers.json>');
  process.exit(2);
}
// The provider reports its loading on stdout; keep stdout for nothing.
console.log = (...args: unknown[]) => console.error(...args);
console.warn = () => {};

type Query = [string, string | null, boolean];
const batch = JSON.parse(readFileSync(batchPath, 'utf8')) as { dir: string; queries: Query[] }[];
const base = pathToFileURL(provider).href;
const answers: unknown[][] = [];
for (const [i, history] of batch.entries()) {
  process.env.DUMP_DIR = history.dir;
  const m = await import(`${base}?history=${i}`);
  answers.push(
    history.queries.map(([model, date, exact]) =>
      m.getLatestBenchmarks(model, date ?? undefined, exact || undefined),
    ),
  );
}
writeFileSync(outPath, JSON.stringify(answers));
