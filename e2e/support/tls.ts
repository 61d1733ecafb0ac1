// Certificates for tests and the local stack, from the operator's certificate code.
export { createCA, localhostTls, type CertificateAuthority, type Pem } from "../../operator/src/concerns/tls/certs.ts";
