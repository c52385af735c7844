// A minimal Lambda Runtime API loop for the Node.js equivalents (what the managed Node runtime
// does around a handler): poll /next, run the handler, post its result or its error.
import http from "node:http";

const [host, port] = process.env.AWS_LAMBDA_RUNTIME_API.split(":");
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const base = "/2018-06-01/runtime/invocation";

function call(method, path, body) {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host, port, method, path, agent, headers: body ? { "content-type": "application/json" } : {} },
      (response) => {
        const chunks = [];
        response.on("data", (chunk) => chunks.push(chunk));
        response.on("end", () => resolve({ headers: response.headers, body: Buffer.concat(chunks).toString() }));
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

export async function serve(handler) {
  for (;;) {
    const next = await call("GET", `${base}/next`);
    const id = next.headers["lambda-runtime-aws-request-id"];
    try {
      const result = await handler(JSON.parse(next.body));
      await call("POST", `${base}/${id}/response`, JSON.stringify(result ?? null));
    } catch (error) {
      const failure = { errorType: error?.name ?? "Error", errorMessage: String(error?.message ?? error) };
      await call("POST", `${base}/${id}/error`, JSON.stringify(failure));
    }
  }
}
