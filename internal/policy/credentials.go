package policy

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Credential is one entry of credentials: a secret the egress proxy puts
// on the wire, in requests to its endpoints only. The sandbox sees a
// placeholder in Env, never the value.
type Credential struct {
	Name string `json:"name"`
	// Secret is the name of the secret whose value is injected.
	Secret string `json:"secret"`
	// Env is the variable that holds the placeholder ("": none).
	Env       string               `json:"env,omitempty"`
	Inject    Injection            `json:"inject"`
	Endpoints []CredentialEndpoint `json:"endpoints"`
}

// Injection says where the proxy puts the value: one of Header, Query,
// BasicAuth or SigV4.
type Injection struct {
	// Header is a header's canonical name: its value becomes Format.
	Header string `json:"header,omitempty"`
	// Query is a query parameter's name: its value becomes Format.
	Query string `json:"query,omitempty"`
	// BasicAuth puts the value in the Basic Authorization header, in
	// place of the placeholder (as user name or password); Username is
	// the user name of a request that sends no such header.
	BasicAuth bool   `json:"basic_auth,omitempty"`
	Username  string `json:"username,omitempty"`
	// Format is what Header or Query becomes, {value} standing for the
	// secret's value; "" is "{value}".
	Format string `json:"format,omitempty"`
	// SigV4 signs requests again with the real keys (AWS Signature
	// Version 4): the secret is the secret access key.
	SigV4 *SigV4 `json:"aws_sigv4,omitempty"`
}

// SigV4 is an AWS Signature Version 4 injection.
type SigV4 struct {
	// AccessKeyID names the secret that holds the access key id.
	AccessKeyID string `json:"access_key_id"`
	// Env is the variable that holds the access key id's placeholder.
	Env string `json:"env,omitempty"`
	// SessionToken, when set, names the secret of a session token.
	SessionToken string `json:"session_token,omitempty"`
	// Region and Service, when set, are the only scope the proxy signs
	// for; else the request's own.
	Region  string `json:"region,omitempty"`
	Service string `json:"service,omitempty"`
}

// ValueFormat is the default Format, and the mark of the value in one.
const ValueFormat = "{value}"

// CredentialEndpoint is where a credential's value may be put on the wire.
type CredentialEndpoint struct {
	Host  string `json:"host"`
	Ports []int  `json:"ports"`
	// Paths are path globs, as an HTTPRule's; none: any path.
	Paths []string `json:"paths,omitempty"`
	// Methods are upper-case methods; none: any method.
	Methods []string `json:"methods,omitempty"`
}

// Allows says whether a request (its normal path) may carry the value.
func (e CredentialEndpoint) Allows(method, path string) bool {
	if len(e.Methods) > 0 && !containsString(e.Methods, method) {
		return false
	}
	if len(e.Paths) == 0 {
		return true
	}
	for _, p := range e.Paths {
		if (HTTPRule{Method: "*", Path: p}).Matches(method, path) {
			return true
		}
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Secrets returns the names of the secrets the credentials bind.
func (p Policy) Secrets() []string {
	var out []string
	for _, c := range p.Credentials {
		out = append(out, c.Secret)
		if v := c.Inject.SigV4; v != nil {
			out = append(out, v.AccessKeyID)
			if v.SessionToken != "" {
				out = append(out, v.SessionToken)
			}
		}
	}
	return out
}

// scopeName is an AWS region's or service's name.
var scopeName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9-]{1,64}$`) })

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`) })

// reservedEnv are variables a credential's placeholder may not take: the
// gateway sets them, and a sandbox's tools rely on them.
var reservedEnv = []string{"PATH", "HOME", "HOSTNAME", "USER", "SHELL", "TERM", "LD_PRELOAD", "LD_LIBRARY_PATH",
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy",
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "NODE_EXTRA_CA_CERTS"}

// credentials reads the credentials section: a mapping of names to
// bindings, in the file's order. Each endpoint must be one an inspecting
// network endpoint allows (checked by checkCredentials, once
// network_policies are read).
func credentials(n *yaml.Node, field string) ([]Credential, error) {
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a mapping of names to credentials, not %s", describe(n))}
	}
	out := []Credential{}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f := field + "." + k.Value
		if k.Kind != yaml.ScalarNode || !policyName().MatchString(k.Value) {
			return nil, &Error{Line: k.Line, Field: f, Msg: "a credential's name is 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit"}
		}
		if prev, dup := seen[k.Value]; dup {
			return nil, &Error{Line: k.Line, Field: f, Msg: fmt.Sprintf("given twice (first on line %d)", prev)}
		}
		seen[k.Value] = k.Line
		c, err := credential(k, v, f)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// credential reads the binding v of the credential named by key k.
func credential(k, n *yaml.Node, field string) (Credential, error) {
	c := Credential{Name: k.Value}
	var injectSeen bool
	err := walk(n, field, fields{
		"secret": func(n *yaml.Node, f string) (err error) {
			c.Secret, err = secretName(n, f)
			return err
		},
		"env": func(n *yaml.Node, f string) (err error) {
			c.Env, err = envVar(n, f)
			return err
		},
		"inject": func(n *yaml.Node, f string) (err error) {
			injectSeen = true
			c.Inject, err = injection(n, f)
			return err
		},
		"endpoints": func(n *yaml.Node, f string) (err error) {
			c.Endpoints, err = credentialEndpoints(n, f)
			return err
		},
	})
	switch {
	case err != nil:
		return c, err
	case c.Secret == "":
		return c, &Error{Line: k.Line, Field: field + ".secret", Msg: "every credential names its secret (corral secret create NAME makes one)"}
	case !injectSeen:
		return c, &Error{Line: k.Line, Field: field + ".inject", Msg: "every credential says where its value goes: inject: {header: NAME}, {query: NAME}, {basic_auth: true} or {aws_sigv4: {...}}"}
	case c.Endpoints == nil:
		return c, &Error{Line: k.Line, Field: field + ".endpoints", Msg: "every credential lists the endpoints its value may be sent to"}
	case c.Inject.SigV4 != nil && c.Inject.SigV4.Env != "" && c.Inject.SigV4.Env == c.Env:
		return c, &Error{Line: k.Line, Field: field + ".inject.aws_sigv4.env", Msg: fmt.Sprintf("%s is the credential's env too: give the access key id's placeholder its own variable", c.Env)}
	}
	return c, nil
}

func secretName(n *yaml.Node, field string) (string, error) {
	s, err := scalar(n, field, "a secret's name")
	if err != nil {
		return "", err
	}
	if err := sandbox.ValidateSecretName(s); err != nil {
		return "", &Error{Line: n.Line, Field: field, Msg: err.Error()}
	}
	return s, nil
}

func envVar(n *yaml.Node, field string) (string, error) {
	s, err := scalar(n, field, "an environment variable's name")
	if err != nil {
		return "", err
	}
	switch {
	case !envName().MatchString(s):
		return "", &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want an environment variable's name (letters, digits and '_', not starting with a digit), not %q", s)}
	case containsString(reservedEnv, s) || strings.HasPrefix(s, "CORRAL_"):
		return "", &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("%s is the gateway's to set: choose another variable", s)}
	}
	return s, nil
}

// reservedHeaders are headers an injection may not set: they frame the
// request, or belong to the proxy.
var reservedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te", "Trailer",
	"Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Expect"}

func injection(n *yaml.Node, field string) (Injection, error) {
	var in Injection
	kinds := 0
	var formatLine int
	err := walk(n, field, fields{
		"header": func(n *yaml.Node, f string) error {
			kinds++
			s, err := scalar(n, f, "a header's name such as Authorization")
			if err != nil {
				return err
			}
			in.Header = http.CanonicalHeaderKey(s)
			if !httpguts.ValidHeaderFieldName(s) || containsString(reservedHeaders, in.Header) {
				return &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("want a header's name such as Authorization or X-Api-Key (not one that frames the request), not %q", s)}
			}
			return nil
		},
		"query": func(n *yaml.Node, f string) error {
			kinds++
			s, err := scalar(n, f, "a query parameter's name")
			if err == nil && (s == "" || strings.ContainsAny(s, "&=#?% \t\r\n")) {
				err = &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("want a query parameter's name, not %q", s)}
			}
			in.Query = s
			return err
		},
		"basic_auth": func(n *yaml.Node, f string) (err error) {
			kinds++
			if in.BasicAuth, err = boolean(n, f); err == nil && !in.BasicAuth {
				err = &Error{Line: n.Line, Field: f, Msg: "basic_auth: true, or another kind of injection"}
			}
			return err
		},
		"username": func(n *yaml.Node, f string) (err error) {
			in.Username, err = scalar(n, f, "a user name")
			if err == nil && strings.ContainsAny(in.Username, ":\r\n") {
				err = &Error{Line: n.Line, Field: f, Msg: "a Basic user name has no ':' and no line break"}
			}
			return err
		},
		"format": func(n *yaml.Node, f string) error {
			formatLine = n.Line
			s, err := scalar(n, f, `a format such as "Bearer {value}"`)
			switch {
			case err != nil:
				return err
			case strings.Count(s, ValueFormat) != 1:
				return &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("a format holds %s once, not %q", ValueFormat, s)}
			case strings.ContainsAny(s, "\r\n\x00"):
				return &Error{Line: n.Line, Field: f, Msg: "a format has no line break"}
			}
			in.Format = s
			return nil
		},
		"aws_sigv4": func(n *yaml.Node, f string) (err error) {
			kinds++
			in.SigV4, err = sigV4(n, f)
			return err
		},
	})
	switch {
	case err != nil:
		return in, err
	case kinds != 1:
		return in, &Error{Line: n.Line, Field: field, Msg: "give one of header, query, basic_auth or aws_sigv4"}
	case formatLine != 0 && in.Header == "" && in.Query == "":
		return in, &Error{Line: formatLine, Field: field + ".format", Msg: "a format is for a header or a query parameter"}
	case in.Username != "" && !in.BasicAuth:
		return in, &Error{Line: n.Line, Field: field + ".username", Msg: "a user name is for basic_auth"}
	}
	return in, nil
}

func sigV4(n *yaml.Node, field string) (*SigV4, error) {
	v := &SigV4{}
	err := walk(n, field, fields{
		"access_key_id": func(n *yaml.Node, f string) (err error) {
			v.AccessKeyID, err = secretName(n, f)
			return err
		},
		"env": func(n *yaml.Node, f string) (err error) {
			v.Env, err = envVar(n, f)
			return err
		},
		"session_token": func(n *yaml.Node, f string) (err error) {
			v.SessionToken, err = secretName(n, f)
			return err
		},
		"region": func(n *yaml.Node, f string) (err error) {
			v.Region, err = matching(n, f, "a region such as us-east-1", scopeName())
			return err
		},
		"service": func(n *yaml.Node, f string) (err error) {
			v.Service, err = matching(n, f, "a service such as s3", scopeName())
			return err
		},
	})
	if err == nil && v.AccessKeyID == "" {
		err = &Error{Line: n.Line, Field: field + ".access_key_id", Msg: "name the secret that holds the access key id (the credential's secret is the secret access key)"}
	}
	return v, err
}

func credentialEndpoints(n *yaml.Node, field string) ([]CredentialEndpoint, error) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a list of one endpoint or more, not %s", describeList(n))}
	}
	out := make([]CredentialEndpoint, 0, len(n.Content))
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		var e CredentialEndpoint
		err := walk(item, f, fields{
			"host": func(n *yaml.Node, f string) (err error) {
				e.Host, err = host(n, f)
				return err
			},
			"port": func(n *yaml.Node, f string) error {
				if e.Ports != nil {
					return &Error{Line: n.Line, Field: f, Msg: "give port or ports, not both"}
				}
				p, err := integer(n, f, 1, 65535)
				e.Ports = []int{p}
				return err
			},
			"ports": func(n *yaml.Node, f string) (err error) {
				if e.Ports != nil {
					return &Error{Line: n.Line, Field: f, Msg: "give port or ports, not both"}
				}
				e.Ports, err = ports(n, f)
				return err
			},
			"paths": func(n *yaml.Node, f string) (err error) {
				e.Paths, err = stringList(n, f, `paths such as ["/repos/**"]`, func(n *yaml.Node, f string) (string, error) {
					s, err := scalar(n, f, `a path such as "/repos/**"`)
					if err == nil {
						if perr := checkPathGlob(s); perr != nil {
							err = &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("%q: %v", s, perr)}
						}
					}
					return s, err
				})
				return err
			},
			"methods": func(n *yaml.Node, f string) (err error) {
				e.Methods, err = stringList(n, f, "methods such as [GET, POST]", func(n *yaml.Node, f string) (string, error) {
					return matching(n, f, "an upper-case HTTP method such as GET", httpMethod())
				})
				return err
			},
		})
		switch {
		case err != nil:
			return nil, err
		case e.Host == "":
			return nil, &Error{Line: item.Line, Field: f + ".host", Msg: "every endpoint needs a host"}
		case e.Ports == nil:
			return nil, &Error{Line: item.Line, Field: f + ".port", Msg: "every endpoint needs a port or ports"}
		}
		out = append(out, e)
	}
	return out, nil
}

// checkCredentials checks what needs the whole policy: each credential
// endpoint is allowed by a network endpoint that inspects requests (the
// proxy sees requests there only), and no two credentials share a
// variable.
func checkCredentials(p Policy, root *yaml.Node) error {
	credsNode := find(root, "credentials")
	envs := map[string]string{}
	for ci, c := range p.Credentials {
		node := credsNode.Content[2*ci+1]
		field := "credentials." + c.Name
		for _, env := range []string{c.Env, sigV4Env(c)} {
			if env == "" {
				continue
			}
			if other, dup := envs[env]; dup {
				return &Error{Line: node.Line, Field: field, Msg: fmt.Sprintf("%s is credentials.%s's variable too", env, other)}
			}
			envs[env] = c.Name
		}
		eps := find(node, "endpoints")
		for ei, e := range c.Endpoints {
			for _, port := range e.Ports {
				name, i, ne, ok := FindEndpoint(p.Network, e.Host, port)
				f := fmt.Sprintf("%s.endpoints[%d]", field, ei)
				line := eps.Content[ei].Line
				switch {
				case !ok:
					return &Error{Line: line, Field: f, Msg: fmt.Sprintf("no network policy allows %s port %d: a credential goes only where network_policies allow, inspected", e.Host, port)}
				case !ne.Inspects():
					return &Error{Line: line, Field: f, Msg: fmt.Sprintf("network_policies.%s.endpoints[%d] allows %s port %d without inspecting it: give it access (such as read-write) or rules, so that the proxy sees the requests it puts the value in", name, i, e.Host, port)}
				}
			}
		}
	}
	return nil
}

func sigV4Env(c Credential) string {
	if c.Inject.SigV4 == nil {
		return ""
	}
	return c.Inject.SigV4.Env
}

// matching reads a scalar that re matches; want says what it is.
func matching(n *yaml.Node, field, want string, re *regexp.Regexp) (string, error) {
	s, err := scalar(n, field, want)
	if err == nil && !re.MatchString(s) {
		err = &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s, not %q", want, s)}
	}
	return s, err
}

// stringList reads a list of one item or more, each read by item.
func stringList(n *yaml.Node, field, want string, item func(n *yaml.Node, field string) (string, error)) ([]string, error) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a list of %s, not %s", want, describeList(n))}
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		s, err := item(c, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
