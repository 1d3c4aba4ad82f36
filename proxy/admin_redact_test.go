package proxy

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"flashgate/conf"
)

// secretLooking matches a field whose name says it holds a secret.
var secretLooking = regexp.MustCompile(`(?i)secret|passw|token|credential|private|sasl|api_?key|(^|_)key($|_)`)

// notSecret are fields whose name looks secret but whose value is not,
// each with the reason.
var notSecret = map[string]string{
	"redis.tls.key_file":               "the path of the client key's PEM file; the file is the secret, the path is not",
	"listen.tls.certificates.key_file": "the path of a server key's PEM file; the file is the secret, the path is not",
	"kafka.tls.key_file":               "the path of the Kafka client key's PEM file; the file is the secret, the path is not",
	"clickhouse.tls.key_file":          "the path of the ClickHouse client key's PEM file; the file is the secret, the path is not",
	"upstreams.routes.cache.key":       "the parts of a request a route's cache key is made of (method, path, header names); no value of a request",
}

// configField is one string-holding field of conf.Config, at a YAML path
// (a list's items share their list's path).
type configField struct {
	path   string
	secret bool // tagged, or inside a tagged field
	index  []int
	typ    reflect.Type
}

// walkConfig lists every field of conf.Config that holds a string, a list
// of strings, or a struct holding them, at any depth.
func walkConfig(t reflect.Type, path string, secret bool, visit func(f reflect.StructField, path string, secret bool)) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		walkConfig(t.Elem(), path, secret, visit)
	case reflect.Map:
		walkConfig(t.Elem(), path, secret, visit)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			p := strings.TrimPrefix(path+"."+name, ".")
			s := secret || f.Tag.Get("secret") == "true"
			visit(f, p, s)
			walkConfig(f.Type, p, s, visit)
		}
	}
}

func holdsString(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	return t.Kind() == reflect.String
}

// TestEverySecretFieldIsMarked walks the whole conf.Config type: a field
// whose name says secret, password, token, key... must be tagged
// `secret:"true"` (or be listed in notSecret with why), and every tagged
// field must hold strings, which is what the redactor hides. A new secret
// field that is not tagged fails here before it reaches /admin/config.
func TestEverySecretFieldIsMarked(t *testing.T) {
	tagged := 0
	walkConfig(reflect.TypeOf(conf.Config{}), "", false, func(f reflect.StructField, path string, secret bool) {
		if f.Tag.Get("secret") == "true" {
			tagged++
			if !holdsString(f.Type) {
				t.Errorf("%s is tagged secret but holds %s: the redactor hides strings", path, f.Type)
			}
		}
		if !holdsString(f.Type) || secret {
			return
		}
		if secretLooking.MatchString(f.Name) || secretLooking.MatchString(path[strings.LastIndexByte(path, '.')+1:]) {
			if _, ok := notSecret[path]; !ok {
				t.Errorf("%s (%s %s) looks like a secret: tag it `secret:\"true\"`, or list it in notSecret with the reason", path, f.Name, f.Type)
			}
		}
	})
	// admin.token, redis.password, redis.sentinel.password, auth.secrets,
	// sale.token_secret, clickhouse.password, kafka.sasl.password.
	if tagged < 7 {
		t.Fatalf("%d fields tagged secret; the walk missed some", tagged)
	}
}

// fillStrings sets every string of v (at any depth, one item per list and
// map, pointers allocated) to a value naming its path, and records which
// of them are secret.
func fillStrings(v reflect.Value, path string, secret bool, n *int, out map[string]bool) {
	switch v.Kind() {
	case reflect.String:
		*n++
		s := fmt.Sprintf("sentinel%03d-%s", *n, strings.ReplaceAll(path, ".", "-"))
		v.SetString(s)
		out[s] = secret
	case reflect.Pointer:
		if v.Type().Elem() == reflect.TypeOf(yaml.Node{}) {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fillStrings(v.Elem(), path, secret, n, out)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillStrings(v.Index(0), path, secret, n, out)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillStrings(k, path+".key", false, n, out)
		fillStrings(e, path, secret, n, out)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			fillStrings(v.Field(i), path+"."+name, secret || f.Tag.Get("secret") == "true", n, out)
		}
	}
}

// TestRedactedConfigHidesEverySecretField fills every string of a Config
// with a value of its own and renders it as /admin/config does: no secret
// field's value may appear, every other field's must (so nothing is
// hidden by leaving it out). Then the same with a URL holding a password
// in every string that is not a secret.
func TestRedactedConfigHidesEverySecretField(t *testing.T) {
	var c conf.Config
	values := map[string]bool{}
	n := 0
	fillStrings(reflect.ValueOf(&c).Elem(), "", false, &n, values)
	out, err := renderConfig(&c)
	if err != nil {
		t.Fatal(err)
	}
	secrets := 0
	for v, secret := range values {
		switch {
		case secret:
			secrets++
			if strings.Contains(string(out), v) {
				t.Errorf("secret %s shown", v)
			}
		case !strings.Contains(string(out), v):
			t.Errorf("%s missing from the output", v)
		}
	}
	if secrets < 6 || strings.Count(string(out), redactedMark) < secrets {
		t.Fatalf("%d secrets, %d REDACTED marks:\n%s", secrets, strings.Count(string(out), redactedMark), out)
	}

	// Userinfo in any URL, in any string field.
	var u conf.Config
	urls := map[string]bool{}
	n = 0
	fillStrings(reflect.ValueOf(&u).Elem(), "", false, &n, urls)
	passwords := []string{}
	setStrings(reflect.ValueOf(&u).Elem(), func(s string) string {
		pw := "pw-" + s
		passwords = append(passwords, pw)
		return "redis://user-" + s + ":" + pw + "@host-" + s + ":6379/0, https://" + pw + "@next-" + s + "/x"
	})
	out, err = renderConfig(&u)
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range passwords {
		if strings.Contains(string(out), pw) {
			t.Fatalf("a URL's userinfo shown (%s):\n%s", pw, out)
		}
	}
	if !strings.Contains(string(out), "redis://REDACTED@host-") || !strings.Contains(string(out), "https://REDACTED@next-") {
		t.Fatalf("URLs not kept apart from their userinfo:\n%s", out)
	}
}

// setStrings replaces every non-empty string reachable from v.
func setStrings(v reflect.Value, f func(string) string) {
	switch v.Kind() {
	case reflect.String:
		if v.String() != "" {
			v.SetString(f(v.String()))
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() && v.Kind() == reflect.Pointer {
			setStrings(v.Elem(), f)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			setStrings(v.Index(i), f)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			setStrings(e, f)
			v.SetMapIndex(it.Key(), e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				setStrings(v.Field(i), f)
			}
		}
	}
}

func TestRedactURLs(t *testing.T) {
	for in, want := range map[string]string{
		"":                                    "",
		"127.0.0.1:6379":                      "127.0.0.1:6379",
		"redis://10.0.0.5:6379/0":             "redis://10.0.0.5:6379/0",
		"redis://:pw@h:1":                     "redis://REDACTED@h:1",
		"rediss://user:p@ss/w@h:1/0?addr=x":   "rediss://REDACTED@h:1/0?addr=x",
		"a redis://u:p@h, b http://t@k/ done": "a redis://REDACTED@h, b http://REDACTED@k/ done",
		"env:REDIS_URL":                       "env:REDIS_URL",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}
