import { ApiException } from "@kubernetes/client-node";
import { JetStreamApiError } from "@nats-io/jetstream";
import { describe, expect, it } from "vitest";
import { errorMessage } from "./errors.ts";

describe("errorMessage", () => {
  it("gives an Error's message, and the string form of anything else", () => {
    expect(errorMessage(new Error("boom"))).toBe("boom");
    expect(errorMessage("plain")).toBe("plain");
    expect(errorMessage(undefined)).toBe("undefined");
    expect(errorMessage(42)).toBe("42");
  });

  it("gives the API server's code and message for a Kubernetes client error", () => {
    expect(errorMessage(new ApiException(409, "Conflict", { message: "the object has been modified" }, {}))).toBe(
      "409: the object has been modified",
    );
    expect(
      errorMessage(new ApiException(404, "Not Found", JSON.stringify({ message: 'agents.ifp.dev "x" not found' }), {})),
    ).toBe('404: agents.ifp.dev "x" not found');
    expect(errorMessage(new ApiException(500, "Server Error", "not json", {}))).toBe("500: not json");
  });

  it("keeps a JetStream API error's own message (its code is not an HTTP status)", () => {
    const err = new JetStreamApiError({ err_code: 10059, code: 404, description: "stream not found" });
    expect(errorMessage(err)).toBe(err.message);
  });
});
