// card-verify: an A2A agent card's signatures (A2A v1.0 section 8.4) checked by libraries of
// another language than the runtime's: go-jose (github.com/go-jose/go-jose/v4) for the JWS and
// the JWKS, and the RFC 8785 reference implementation (github.com/cyberphone/json-canonicalization)
// for the canonical form, with section 8.4.1's cleaning (no `signatures`, no empty repeated
// fields, no unset ones) written here. For runtime/test/a2a/a2a.test.ts; built into the tool
// cache by e2e/tools/tools.ts.
//
//	card-verify CARD.json JWKS.json
//
// prints {"verified": true, "kids": [...]} when every signature verifies with the key of the
// JWKS its kid names, with an algorithm that key's type has, and otherwise {"error": "..."} and
// exits 1.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	jsoncanonicalizer "github.com/cyberphone/json-canonicalization/go/src/webpki.org/jsoncanonicalizer"
	jose "github.com/go-jose/go-jose/v4"
)

// The asymmetric algorithms a card may be signed with: a JWKS is public, so never HMAC or none.
var algorithms = []jose.SignatureAlgorithm{
	jose.EdDSA, jose.ES256, jose.ES384, jose.ES512,
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
}

func fail(err error) {
	b, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(b))
	os.Exit(1)
}

func readJSON(path string, into any) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(into); err != nil {
		fail(fmt.Errorf("%s: %w", path, err))
	}
}

// clean drops what section 8.4.1 leaves out of the payload: null (unset) values and empty lists.
// It reports false for a value to drop.
func clean(v any) (any, bool) {
	switch t := v.(type) {
	case nil:
		return nil, false
	case []any:
		if len(t) == 0 {
			return nil, false
		}
		out := make([]any, 0, len(t))
		for _, item := range t {
			if c, ok := clean(item); ok {
				out = append(out, c)
			}
		}
		return out, true
	case map[string]any:
		out := map[string]any{}
		for k, item := range t {
			if c, ok := clean(item); ok {
				out[k] = c
			}
		}
		return out, true
	default:
		return v, true
	}
}

func main() {
	if len(os.Args) != 3 {
		fail(fmt.Errorf("usage: card-verify CARD.json JWKS.json"))
	}
	var card map[string]any
	readJSON(os.Args[1], &card)
	var keys jose.JSONWebKeySet
	data, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail(err)
	}
	if err := json.Unmarshal(data, &keys); err != nil {
		fail(fmt.Errorf("the JWKS: %w", err))
	}
	signatures, _ := card["signatures"].([]any)
	if len(signatures) == 0 {
		fail(fmt.Errorf("the card has no signatures"))
	}
	delete(card, "signatures")
	cleaned, _ := clean(card)
	raw, err := json.Marshal(cleaned)
	if err != nil {
		fail(err)
	}
	payload, err := jsoncanonicalizer.Transform(raw)
	if err != nil {
		fail(fmt.Errorf("canonicalizing the card: %w", err))
	}
	kids := []string{}
	for i, s := range signatures {
		entry, _ := s.(map[string]any)
		protected, _ := entry["protected"].(string)
		signature, _ := entry["signature"].(string)
		if protected == "" || signature == "" {
			fail(fmt.Errorf("signature %d has no protected header or no signature", i+1))
		}
		jws, err := jose.ParseDetached(protected+".."+signature, payload, algorithms)
		if err != nil {
			fail(fmt.Errorf("signature %d: %w", i+1, err))
		}
		header := jws.Signatures[0].Protected
		found := keys.Key(header.KeyID)
		if len(found) != 1 {
			fail(fmt.Errorf("signature %d: the JWKS has %d keys %q", i+1, len(found), header.KeyID))
		}
		if _, err := jws.Verify(found[0].Public().Key); err != nil {
			fail(fmt.Errorf("signature %d (kid %s, %s): %w", i+1, header.KeyID, header.Algorithm, err))
		}
		kids = append(kids, header.KeyID)
	}
	b, _ := json.Marshal(map[string]any{"verified": true, "kids": kids})
	fmt.Println(string(b))
}
