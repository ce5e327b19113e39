--
-- PostgreSQL database dump
--

\restrict WCvDqVJAlkkZQ31aXPFa8krvLhzDFcOddbwDcoEP5BXpGAhVxLweZMQYwVvTWyd

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: attest_challenges; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.attest_challenges (
    id text NOT NULL,
    token_hash text NOT NULL,
    boot_id text NOT NULL,
    ek_public bytea NOT NULL,
    ek_cert bytea NOT NULL,
    ek_chain bytea NOT NULL,
    ak_public bytea NOT NULL,
    pcrs text DEFAULT '[]'::text NOT NULL,
    nonce bytea NOT NULL,
    secret_sha256 text NOT NULL,
    issued_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    used_at bigint DEFAULT 0 NOT NULL,
    used_by text DEFAULT ''::text NOT NULL
);


--
-- Name: audit_log; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log (
    id bigint NOT NULL,
    "time" bigint NOT NULL,
    kind text NOT NULL,
    actor text DEFAULT ''::text NOT NULL,
    role text DEFAULT ''::text NOT NULL,
    peer text DEFAULT ''::text NOT NULL,
    action text DEFAULT ''::text NOT NULL,
    nodes text DEFAULT '[]'::text NOT NULL,
    run_id text DEFAULT ''::text NOT NULL,
    result text DEFAULT ''::text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    CONSTRAINT audit_log_kind_check CHECK ((kind = ANY (ARRAY['operator'::text, 'security'::text])))
);


--
-- Name: audit_log_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: boot_attestations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.boot_attestations (
    run_id text NOT NULL,
    boot_id text NOT NULL,
    node_id text NOT NULL,
    status text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    ek_sha256 text DEFAULT ''::text NOT NULL,
    "time" bigint NOT NULL
);


--
-- Name: boot_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.boot_tokens (
    token_sha256 text NOT NULL,
    node_id text NOT NULL,
    run_id text NOT NULL,
    "window" text NOT NULL,
    peer text DEFAULT ''::text NOT NULL,
    issued_at bigint NOT NULL,
    expires bigint NOT NULL,
    state text NOT NULL,
    revoked_why text DEFAULT ''::text NOT NULL,
    boot_id text DEFAULT ''::text NOT NULL,
    session_sha256 text DEFAULT ''::text NOT NULL,
    bound_at bigint DEFAULT 0 NOT NULL,
    bound_peer text DEFAULT ''::text NOT NULL,
    reconnects bigint DEFAULT 0 NOT NULL,
    CONSTRAINT boot_tokens_state_check CHECK ((state = ANY (ARRAY['issued'::text, 'bound'::text, 'revoked'::text])))
);


--
-- Name: events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.events (
    id bigint NOT NULL,
    run_id text NOT NULL,
    node_id text DEFAULT ''::text NOT NULL,
    source text NOT NULL,
    boot_id text DEFAULT ''::text NOT NULL,
    seq bigint DEFAULT 0 NOT NULL,
    "time" bigint DEFAULT 0 NOT NULL,
    phase text DEFAULT ''::text NOT NULL,
    kind text NOT NULL,
    status text DEFAULT ''::text NOT NULL,
    message text DEFAULT ''::text NOT NULL,
    duration_ms bigint DEFAULT 0 NOT NULL,
    payload bytea,
    note boolean DEFAULT false NOT NULL,
    CONSTRAINT events_kind_check CHECK ((kind = ANY (ARRAY['phase_start'::text, 'phase_end'::text, 'verdict'::text, 'log'::text, 'metric'::text, 'run_end'::text, 'info'::text, 'host_ready'::text, 'unknown'::text]))),
    CONSTRAINT events_source_check CHECK ((source = ANY (ARRAY['coordinator'::text, 'runner'::text, 'hostos'::text])))
);


--
-- Name: events_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: firmware_pcrs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.firmware_pcrs (
    node_id text NOT NULL,
    sku text DEFAULT ''::text NOT NULL,
    firmware text DEFAULT ''::text NOT NULL,
    pcrs text DEFAULT '{}'::text NOT NULL,
    run_id text DEFAULT ''::text NOT NULL,
    recorded_at bigint DEFAULT 0 NOT NULL,
    change_run text DEFAULT ''::text NOT NULL,
    change_reason text DEFAULT ''::text NOT NULL,
    hold_run text DEFAULT ''::text NOT NULL,
    hold_detail text DEFAULT ''::text NOT NULL,
    hold_at bigint DEFAULT 0 NOT NULL,
    hold_pcrs text DEFAULT '{}'::text NOT NULL,
    hold_firmware text DEFAULT ''::text NOT NULL
);


--
-- Name: inventories; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.inventories (
    id bigint NOT NULL,
    node_id text NOT NULL,
    run_id text NOT NULL,
    boot_id text NOT NULL,
    "time" bigint NOT NULL,
    peer text DEFAULT ''::text NOT NULL,
    inventory text NOT NULL,
    truncated boolean DEFAULT false NOT NULL
);


--
-- Name: inventories_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.inventories ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.inventories_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: measurements; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.measurements (
    run_id text NOT NULL,
    node_id text NOT NULL,
    sku text DEFAULT ''::text NOT NULL,
    suite text DEFAULT ''::text NOT NULL,
    check_name text NOT NULL,
    component text NOT NULL,
    metric text NOT NULL,
    value double precision NOT NULL,
    unit text DEFAULT ''::text NOT NULL,
    "time" bigint NOT NULL,
    passed boolean DEFAULT false NOT NULL
);


--
-- Name: node_eks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.node_eks (
    node_id text NOT NULL,
    ek_sha256 text NOT NULL,
    source text NOT NULL,
    enrolled_at bigint NOT NULL,
    run_id text DEFAULT ''::text NOT NULL,
    CONSTRAINT node_eks_source_check CHECK ((source = ANY (ARRAY['tofu'::text, 'pinned'::text])))
);


--
-- Name: node_macs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.node_macs (
    mac text NOT NULL,
    node_id text NOT NULL,
    pos integer NOT NULL
);


--
-- Name: node_os; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.node_os (
    node_id text NOT NULL,
    token_sha256 text NOT NULL,
    run_id text NOT NULL,
    installed_at bigint NOT NULL
);


--
-- Name: node_pool; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.node_pool (
    node_id text NOT NULL,
    state text NOT NULL,
    since bigint NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    actor text DEFAULT ''::text NOT NULL,
    run_id text DEFAULT ''::text NOT NULL,
    auto_return boolean DEFAULT false NOT NULL,
    CONSTRAINT node_pool_state_check CHECK ((state = ANY (ARRAY['in_service'::text, 'draining'::text, 'drained'::text, 'revalidating'::text, 'ready'::text, 'rma'::text, 'accepting'::text, 'quarantined'::text])))
);


--
-- Name: nodes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.nodes (
    id text NOT NULL,
    bmc_url text DEFAULT ''::text NOT NULL,
    bmc_user text DEFAULT ''::text NOT NULL,
    bmc_password text DEFAULT ''::text NOT NULL,
    sku text DEFAULT ''::text NOT NULL,
    hostname text DEFAULT ''::text NOT NULL,
    system_serial text DEFAULT ''::text NOT NULL,
    psids text DEFAULT '{}'::text NOT NULL,
    labels text DEFAULT '{}'::text NOT NULL,
    updated_at bigint NOT NULL,
    bmc_password_ref text DEFAULT ''::text NOT NULL,
    bmc_ca_file text DEFAULT ''::text NOT NULL,
    bmc_fingerprint text DEFAULT ''::text NOT NULL,
    bmc_insecure boolean DEFAULT false NOT NULL,
    removed_at bigint DEFAULT 0 NOT NULL
);


--
-- Name: phases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.phases (
    run_id text NOT NULL,
    name text NOT NULL,
    status text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    started_at bigint DEFAULT 0 NOT NULL,
    ended_at bigint DEFAULT 0 NOT NULL,
    message text DEFAULT ''::text NOT NULL,
    ord integer NOT NULL,
    CONSTRAINT phases_status_check CHECK ((status = ANY (ARRAY['running'::text, 'ok'::text, 'skipped'::text, 'failed'::text])))
);


--
-- Name: run_bmc_evidence; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_bmc_evidence (
    run_id text NOT NULL,
    "time" bigint NOT NULL,
    evidence text NOT NULL
);


--
-- Name: run_fleet; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_fleet (
    run_id text NOT NULL,
    "time" bigint NOT NULL,
    judgements text NOT NULL,
    sku text DEFAULT ''::text NOT NULL,
    pending text DEFAULT ''::text NOT NULL,
    rev bigint DEFAULT 0 NOT NULL
);


--
-- Name: run_progress; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_progress (
    run_id text NOT NULL,
    boot_id text NOT NULL,
    seq bigint NOT NULL,
    phase text DEFAULT ''::text NOT NULL,
    "time" bigint NOT NULL,
    received bigint NOT NULL,
    progress text NOT NULL
);


--
-- Name: run_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_usage (
    run_id text NOT NULL,
    events bigint DEFAULT 0 NOT NULL,
    bytes bigint DEFAULT 0 NOT NULL,
    dropped bigint DEFAULT 0 NOT NULL,
    verdicts bigint DEFAULT 0 NOT NULL,
    notes bigint DEFAULT 0 NOT NULL,
    notes_dropped bigint DEFAULT 0 NOT NULL,
    measurements bigint DEFAULT 0 NOT NULL
);


--
-- Name: runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.runs (
    rowid bigint NOT NULL,
    id text NOT NULL,
    node_id text NOT NULL,
    mode text DEFAULT ''::text NOT NULL,
    manifest text DEFAULT ''::text NOT NULL,
    status text NOT NULL,
    phase text DEFAULT ''::text NOT NULL,
    resume_count integer DEFAULT 0 NOT NULL,
    phase_failures integer DEFAULT 0 NOT NULL,
    disconnects integer DEFAULT 0 NOT NULL,
    reboots integer DEFAULT 0 NOT NULL,
    completed_phases text DEFAULT '[]'::text NOT NULL,
    started_at bigint DEFAULT 0 NOT NULL,
    ended_at bigint DEFAULT 0 NOT NULL,
    message text DEFAULT ''::text NOT NULL,
    data text DEFAULT '{}'::text NOT NULL,
    created_at bigint NOT NULL,
    owner text DEFAULT ''::text NOT NULL,
    lease_until bigint DEFAULT 0 NOT NULL,
    pipeline text DEFAULT ''::text NOT NULL,
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'attention'::text, 'canceled'::text])))
);


--
-- Name: runs_rowid_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.runs ALTER COLUMN rowid ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.runs_rowid_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: schema_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_version (
    version integer NOT NULL
);


--
-- Name: series; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.series (
    run_id text NOT NULL,
    source text NOT NULL,
    component text NOT NULL,
    metric text NOT NULL,
    unit text DEFAULT ''::text NOT NULL,
    points text NOT NULL,
    thinned bigint DEFAULT 0 NOT NULL
);


--
-- Name: sku_pcrs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sku_pcrs (
    sku text NOT NULL,
    firmware text NOT NULL,
    pcr integer NOT NULL,
    image text DEFAULT ''::text NOT NULL,
    value text NOT NULL,
    node_id text DEFAULT ''::text NOT NULL,
    run_id text DEFAULT ''::text NOT NULL,
    recorded_at bigint DEFAULT 0 NOT NULL
);


--
-- Name: verdicts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.verdicts (
    run_id text NOT NULL,
    component text NOT NULL,
    check_name text NOT NULL,
    status text NOT NULL,
    observed text DEFAULT ''::text NOT NULL,
    expected text DEFAULT ''::text NOT NULL,
    message text DEFAULT ''::text NOT NULL,
    "time" bigint DEFAULT 0 NOT NULL,
    at bigint DEFAULT 0 NOT NULL,
    stage text DEFAULT ''::text NOT NULL
);


--
-- Data for Name: attest_challenges; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: audit_log; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: boot_attestations; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: boot_tokens; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: events; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.events OVERRIDING SYSTEM VALUE VALUES (1, 'prev-run-done', 'prev-n1', 'coordinator', '', 0, 1793523600000, '', 'info', '', 'made by the previous release', 0, NULL, false);
INSERT INTO public.events OVERRIDING SYSTEM VALUE VALUES (2, 'prev-run-live', 'prev-n2', 'coordinator', '', 0, 1793527200000, '', 'info', '', 'in flight when the previous release stopped', 0, NULL, false);


--
-- Data for Name: firmware_pcrs; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: inventories; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: measurements; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: node_eks; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: node_macs; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.node_macs VALUES ('52:54:00:00:00:01', 'prev-n1', 0);
INSERT INTO public.node_macs VALUES ('52:54:00:00:00:02', 'prev-n2', 0);
INSERT INTO public.node_macs VALUES ('52:54:00:00:00:03', 'prev-n3', 0);


--
-- Data for Name: node_os; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: node_pool; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: nodes; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.nodes VALUES ('prev-n1', 'https://10.0.0.1', 'admin', 'enc:v1:1SqrCIik4T9ZxO52n/dyvK+ykzeuYhjMGOhtKJDuSobEMe7KERQ', 'qemu-nvme', '', 'SER-prev-n1', '{}', '{"rack":"r1"}', 1795917171083, '', '', '', false, 0);
INSERT INTO public.nodes VALUES ('prev-n2', 'https://10.0.0.2', 'admin', 'enc:v1:T3QU53Ie2vTvs9hVvuSCqtYnBQEuQf0+rhC02XtLyOR0PfBa5w0', 'qemu-nvme', '', 'SER-prev-n2', '{}', '{"rack":"r1"}', 1795917171092, '', '', '', false, 0);
INSERT INTO public.nodes VALUES ('prev-n3', 'https://10.0.0.3', 'admin', 'enc:v1:LExyDYCvt9fjLGTD5451ARMil0I6s65SDlgOqM+3wQCgR+CEifA', 'qemu-nvme', '', 'SER-prev-n3', '{}', '{"rack":"r1"}', 1795917171095, '', '', '', false, 0);


--
-- Data for Name: phases; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.phases VALUES ('prev-run-done', 'preflight', 'ok', 1, 1793523600000, 1793523630000, 'ok', 1);
INSERT INTO public.phases VALUES ('prev-run-done', 'powering_on', 'ok', 1, 1793523660000, 1793523690000, 'ok', 2);
INSERT INTO public.phases VALUES ('prev-run-done', 'wait_for_cure', 'ok', 1, 1793523720000, 1793523750000, 'ok', 3);
INSERT INTO public.phases VALUES ('prev-run-live', 'preflight', 'ok', 1, 1793527200000, 1793527201000, '', 1);
INSERT INTO public.phases VALUES ('prev-run-live', 'wait_for_cure', 'running', 1, 1793527260000, 0, '', 2);


--
-- Data for Name: run_bmc_evidence; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: run_fleet; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: run_progress; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: run_usage; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: runs; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.runs OVERRIDING SYSTEM VALUE VALUES (1, 'prev-run-done', 'prev-n1', 'provision', 'qemu-nvme', 'succeeded', 'wait_for_cure', 0, 0, 0, 0, '["preflight","powering_on","wait_for_cure"]', 1793523600000, 1793523840000, 'provisioned', '{}', 1795917171097, '', 0, '{}');
INSERT INTO public.runs OVERRIDING SYSTEM VALUE VALUES (2, 'prev-run-live', 'prev-n2', 'provision', 'qemu-nvme', 'running', 'wait_for_cure', 0, 0, 0, 0, '["preflight"]', 1793527200000, 0, '', '{}', 1795917171104, '', 0, '{"boot_requested_at":"2026-11-01T10:01:00Z"}');


--
-- Data for Name: schema_version; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_version VALUES (16);


--
-- Data for Name: series; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: sku_pcrs; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: verdicts; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.verdicts VALUES ('prev-run-done', 'nvme/0', 'firmware', 'PASS', '1.0', '1.0', '', 1793523780000, 0, '');


--
-- Name: audit_log_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.audit_log_id_seq', 1, false);


--
-- Name: events_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.events_id_seq', 2, true);


--
-- Name: inventories_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.inventories_id_seq', 1, false);


--
-- Name: runs_rowid_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.runs_rowid_seq', 2, true);


--
-- Name: attest_challenges attest_challenges_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attest_challenges
    ADD CONSTRAINT attest_challenges_pkey PRIMARY KEY (id);


--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);


--
-- Name: boot_attestations boot_attestations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.boot_attestations
    ADD CONSTRAINT boot_attestations_pkey PRIMARY KEY (run_id, boot_id);


--
-- Name: boot_tokens boot_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.boot_tokens
    ADD CONSTRAINT boot_tokens_pkey PRIMARY KEY (token_sha256);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);


--
-- Name: firmware_pcrs firmware_pcrs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.firmware_pcrs
    ADD CONSTRAINT firmware_pcrs_pkey PRIMARY KEY (node_id);


--
-- Name: inventories inventories_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inventories
    ADD CONSTRAINT inventories_pkey PRIMARY KEY (id);


--
-- Name: measurements measurements_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.measurements
    ADD CONSTRAINT measurements_pkey PRIMARY KEY (run_id, component, check_name, metric);


--
-- Name: node_eks node_eks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_eks
    ADD CONSTRAINT node_eks_pkey PRIMARY KEY (node_id);


--
-- Name: node_macs node_macs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_macs
    ADD CONSTRAINT node_macs_pkey PRIMARY KEY (mac);


--
-- Name: node_os node_os_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_os
    ADD CONSTRAINT node_os_pkey PRIMARY KEY (node_id);


--
-- Name: node_pool node_pool_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_pool
    ADD CONSTRAINT node_pool_pkey PRIMARY KEY (node_id);


--
-- Name: nodes nodes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (id);


--
-- Name: phases phases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.phases
    ADD CONSTRAINT phases_pkey PRIMARY KEY (run_id, name);


--
-- Name: run_bmc_evidence run_bmc_evidence_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_bmc_evidence
    ADD CONSTRAINT run_bmc_evidence_pkey PRIMARY KEY (run_id);


--
-- Name: run_fleet run_fleet_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_fleet
    ADD CONSTRAINT run_fleet_pkey PRIMARY KEY (run_id);


--
-- Name: run_progress run_progress_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_progress
    ADD CONSTRAINT run_progress_pkey PRIMARY KEY (run_id);


--
-- Name: run_usage run_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_usage
    ADD CONSTRAINT run_usage_pkey PRIMARY KEY (run_id);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);


--
-- Name: series series_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.series
    ADD CONSTRAINT series_pkey PRIMARY KEY (run_id, source, component, metric);


--
-- Name: sku_pcrs sku_pcrs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sku_pcrs
    ADD CONSTRAINT sku_pcrs_pkey PRIMARY KEY (sku, firmware, pcr, image);


--
-- Name: verdicts verdicts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.verdicts
    ADD CONSTRAINT verdicts_pkey PRIMARY KEY (run_id, component, check_name);


--
-- Name: attest_challenges_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX attest_challenges_expiry ON public.attest_challenges USING btree (expires_at);


--
-- Name: attest_challenges_issued; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX attest_challenges_issued ON public.attest_challenges USING btree (issued_at);


--
-- Name: audit_log_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX audit_log_time ON public.audit_log USING btree ("time");


--
-- Name: boot_tokens_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX boot_tokens_expires ON public.boot_tokens USING btree (expires);


--
-- Name: boot_tokens_node; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX boot_tokens_node ON public.boot_tokens USING btree (node_id, issued_at);


--
-- Name: boot_tokens_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX boot_tokens_run ON public.boot_tokens USING btree (run_id, "window");


--
-- Name: events_dedup; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX events_dedup ON public.events USING btree (run_id, source, boot_id, seq) WHERE (seq > 0);


--
-- Name: events_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX events_run ON public.events USING btree (run_id, id);


--
-- Name: inventories_boot; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX inventories_boot ON public.inventories USING btree (run_id, boot_id);


--
-- Name: inventories_node; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX inventories_node ON public.inventories USING btree (node_id, id);


--
-- Name: measurements_fleet; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX measurements_fleet ON public.measurements USING btree (sku, check_name, metric, "time");


--
-- Name: measurements_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX measurements_time ON public.measurements USING btree ("time");


--
-- Name: node_macs_node; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX node_macs_node ON public.node_macs USING btree (node_id);


--
-- Name: run_fleet_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX run_fleet_pending ON public.run_fleet USING btree (sku, pending, "time");


--
-- Name: runs_lease; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_lease ON public.runs USING btree (status, lease_until);


--
-- Name: runs_node; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_node ON public.runs USING btree (node_id, created_at);


--
-- Name: runs_one_active; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX runs_one_active ON public.runs USING btree (node_id) WHERE (status = ANY (ARRAY['pending'::text, 'running'::text]));


--
-- Name: runs_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_status ON public.runs USING btree (status);


--
-- Name: boot_tokens boot_tokens_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.boot_tokens
    ADD CONSTRAINT boot_tokens_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id) ON DELETE CASCADE;


--
-- Name: boot_tokens boot_tokens_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.boot_tokens
    ADD CONSTRAINT boot_tokens_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: events events_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: firmware_pcrs firmware_pcrs_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.firmware_pcrs
    ADD CONSTRAINT firmware_pcrs_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id) ON DELETE CASCADE;


--
-- Name: inventories inventories_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inventories
    ADD CONSTRAINT inventories_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id) ON DELETE CASCADE;


--
-- Name: inventories inventories_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inventories
    ADD CONSTRAINT inventories_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: measurements measurements_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.measurements
    ADD CONSTRAINT measurements_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: node_eks node_eks_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_eks
    ADD CONSTRAINT node_eks_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id) ON DELETE CASCADE;


--
-- Name: node_macs node_macs_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_macs
    ADD CONSTRAINT node_macs_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id) ON DELETE CASCADE;


--
-- Name: node_os node_os_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_os
    ADD CONSTRAINT node_os_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id) ON DELETE CASCADE;


--
-- Name: node_pool node_pool_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.node_pool
    ADD CONSTRAINT node_pool_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id) ON DELETE CASCADE;


--
-- Name: phases phases_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.phases
    ADD CONSTRAINT phases_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: run_bmc_evidence run_bmc_evidence_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_bmc_evidence
    ADD CONSTRAINT run_bmc_evidence_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: run_fleet run_fleet_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_fleet
    ADD CONSTRAINT run_fleet_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: run_progress run_progress_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_progress
    ADD CONSTRAINT run_progress_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: run_usage run_usage_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_usage
    ADD CONSTRAINT run_usage_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: runs runs_node_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_node_id_fkey FOREIGN KEY (node_id) REFERENCES public.nodes(id);


--
-- Name: series series_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.series
    ADD CONSTRAINT series_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: verdicts verdicts_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.verdicts
    ADD CONSTRAINT verdicts_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict WCvDqVJAlkkZQ31aXPFa8krvLhzDFcOddbwDcoEP5BXpGAhVxLweZMQYwVvTWyd

