// spec.tls: the serving certificate (a Secret or a cert-manager issuer), its DNS names, and the
// extra CAs a runtime trusts for its outbound calls.
import { z } from "zod";
import { cel } from "./schema.ts";

/** A key of a ConfigMap or Secret in the resource's namespace holding PEM CA certificates. */
const TrustKeyRef = z.object({
  name: z
    .string()
    .min(1)
    .max(253)
    .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "must be the name of an object in the resource's namespace")
    .describe("The object's name, in the resource's namespace"),
  key: z
    .string()
    .min(1)
    .max(253)
    .regex(/^[-._a-zA-Z0-9]+$/, "must be a ConfigMap or Secret key")
    .default("ca.crt")
    .describe("The key holding the PEM certificates"),
});

/** One entry of spec.tls.trust: a ConfigMap's or a Secret's key with PEM CA certificates. */
export const TrustSource = z
  .object({
    configMapRef: TrustKeyRef.optional().describe("A ConfigMap's key with PEM CA certificates"),
    secretRef: TrustKeyRef.optional().describe("A Secret's key with PEM CA certificates"),
  })
  .refine(
    (t) => !!t.configMapRef !== !!t.secretRef,
    "each spec.tls.trust entry takes exactly one of configMapRef and secretRef",
  )
  .meta(
    cel({
      rule: "has(self.configMapRef) != has(self.secretRef)",
      message: "each spec.tls.trust entry takes exactly one of configMapRef and secretRef",
    }),
  );

export const TlsSpec = z
  .object({
    secretName: z.string().min(1).optional().describe("Secret of type kubernetes.io/tls with tls.crt and tls.key"),
    issuerRef: z
      .object({
        name: z.string().min(1).describe("The issuer's name"),
        kind: z.string().default("Issuer").describe("Issuer (in the resource's namespace) or ClusterIssuer"),
        group: z.string().default("cert-manager.io").describe("The issuer's API group"),
      })
      .optional()
      .describe("cert-manager issuer that signs the serving certificate"),
    dnsNames: z
      .array(z.string().min(1))
      .optional()
      .describe("DNS names of the serving certificate, besides the Service's own"),
    trust: z
      .array(TrustSource)
      .max(16)
      .optional()
      .describe(
        "extra CAs this runtime trusts for its outbound calls, besides the system roots and the install's CA bundle",
      ),
  })
  .meta(
    cel({
      rule: "!(has(self.secretName) && has(self.issuerRef))",
      message: "spec.tls takes secretName or issuerRef, not both",
    }),
  );
