package plugin

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Spec names a tuner the way the commands' --tuner flags do.
type Spec struct {
	Name    string        // none (or ""), a NAME or a PATH: see Resolve
	Config  string        // configuration file handed to the plugin; "" for none
	Timeout time.Duration // start and per-call deadline; 0 takes the defaults
	SHA256  string        // the binary's SHA-256 in hex, pinning it; "" for no pin
	// ConfigSHA256 pins the configuration file's bytes (hex SHA-256) the same way; "" for no pin.
	// The planner service pins both when it loads a set, so that a restart after a crash runs
	// the binary and the configuration the set was loaded with, or nothing.
	ConfigSHA256 string
}

// None reports whether s names no tuner (the planner's built-in policy).
func (s Spec) None() bool { return s.Name == "" || strings.EqualFold(s.Name, "none") }

// String is "none", NAME or "NAME (CONFIG)".
func (s Spec) String() string {
	switch {
	case s.None():
		return "none"
	case s.Config != "":
		return s.Name + " (" + s.Config + ")"
	}
	return s.Name
}

// Check checks s as Open does, without making a client: the binary resolves, the configuration
// is a text file, the timeout and the pin are well formed. Commands that start ranks check their
// tuner flags once with it, before any rank starts.
func (s Spec) Check() error {
	_, _, err := s.config()
	return err
}

// config checks s and returns the client's configuration, Path "" for no tuner.
func (s Spec) config() (Config, string, error) {
	path, err := Resolve(s.Name)
	if err != nil {
		return Config{}, "", err
	}
	if path == "" {
		if s.Config != "" || s.Timeout != 0 || s.SHA256 != "" {
			return Config{}, "", fmt.Errorf("plugin: --tuner-config, --tuner-timeout and --tuner-sha256 need --tuner")
		}
		return Config{}, "", nil
	}
	if s.Timeout < 0 {
		return Config{}, "", fmt.Errorf("plugin: tuner timeout %s: must be positive", s.Timeout)
	}
	cfg := Config{Path: path, ConfigPath: s.Config, StartTimeout: s.Timeout, CallTimeout: s.Timeout}
	if s.SHA256 != "" {
		if cfg.SHA256, err = hex.DecodeString(strings.TrimSpace(s.SHA256)); err != nil || len(cfg.SHA256) != 32 {
			return Config{}, "", fmt.Errorf("plugin: tuner sha256 %q: want 64 hex digits", s.SHA256)
		}
	}
	if s.ConfigSHA256 != "" {
		if cfg.ConfigSHA256, err = hex.DecodeString(strings.TrimSpace(s.ConfigSHA256)); err != nil || len(cfg.ConfigSHA256) != 32 {
			return Config{}, "", fmt.Errorf("plugin: tuner configuration sha256 %q: want 64 hex digits", s.ConfigSHA256)
		}
	}
	if s.Config != "" {
		if err := checkConfig(s.Config); err != nil {
			return Config{}, "", err
		}
	}
	return cfg, path, nil
}

// Open checks s, resolves its binary and returns its client, which logs to logTo (EnvLogger);
// nothing starts until the first call. For no tuner it returns nil and no error, unless s also
// sets a configuration, a timeout or a pin, which need a tuner. Every error names the flag or file
// at fault.
func Open(s Spec, logTo io.Writer) (*Client, error) {
	cfg, path, err := s.config()
	if err != nil || path == "" {
		return nil, err
	}
	if cfg.Logger, err = EnvLogger(logTo); err != nil {
		return nil, err
	}
	return New(cfg)
}

// checkConfig refuses a --tuner-config that cannot be a configuration: missing, unreadable, a
// directory or another non-regular file, or binary (a NUL byte in its first 4 KiB; every policy's
// configuration is text).
func checkConfig(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("plugin: --tuner-config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("plugin: --tuner-config: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("plugin: --tuner-config %s: a directory, not a configuration file", path)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("plugin: --tuner-config %s: not a regular file", path)
	}
	head := make([]byte, 4096)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return fmt.Errorf("plugin: --tuner-config: %w", err)
	}
	if bytes.IndexByte(head[:n], 0) >= 0 {
		return fmt.Errorf("plugin: --tuner-config %s: a binary file, not a tuner configuration", path)
	}
	return nil
}
