-- A job store written by wattwise 0.1.0 (schema version 1, before Alembic) on PostgreSQL 15:
-- the recurring-job history of two jobs, filled through that release's SqlJobStore, then
-- pg_dump --inserts --no-owner --no-privileges -t 'wattwise_*' (psql meta-commands removed).
-- tests/test_store_migrations.py upgrades it and checks that no row is lost.

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

CREATE TABLE public.wattwise_jobs (
    name character varying(128) NOT NULL,
    batch_sizes text NOT NULL,
    default_batch_size integer NOT NULL,
    target_metric double precision NOT NULL,
    metric_mode character varying(3) NOT NULL,
    max_epochs integer NOT NULL,
    max_power_w double precision NOT NULL,
    eta double precision NOT NULL,
    beta double precision NOT NULL,
    created_at_s double precision NOT NULL
);

CREATE TABLE public.wattwise_power_limits (
    job_name character varying(128) NOT NULL,
    batch_size integer NOT NULL,
    power_limit_w double precision NOT NULL
);

CREATE TABLE public.wattwise_runs (
    id integer NOT NULL,
    job_name character varying(128) NOT NULL,
    batch_size integer NOT NULL,
    phase character varying(16) NOT NULL,
    state character varying(16) NOT NULL,
    power_limit_w double precision,
    cost_limit double precision,
    epochs integer NOT NULL,
    energy_j double precision,
    time_s double precision,
    cost double precision,
    started_at_s double precision NOT NULL,
    updated_at_s double precision NOT NULL
);

CREATE SEQUENCE public.wattwise_runs_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.wattwise_runs_id_seq OWNED BY public.wattwise_runs.id;

CREATE TABLE public.wattwise_schema_version (
    version integer NOT NULL
);

ALTER TABLE ONLY public.wattwise_runs ALTER COLUMN id SET DEFAULT nextval('public.wattwise_runs_id_seq'::regclass);

INSERT INTO public.wattwise_jobs VALUES ('bert/squad', '[16, 32, 64]', 32, 84, 'max', 6, 250, 0.5, 2, 1700000074);
INSERT INTO public.wattwise_jobs VALUES ('team.a/resnet50@v2', '[128, 256]', 256, 0.65, 'max', 10, 1200, 0.3, 2.5, 1700001258);

INSERT INTO public.wattwise_power_limits VALUES ('bert/squad', 32, 200);
INSERT INTO public.wattwise_power_limits VALUES ('bert/squad', 16, 200);
INSERT INTO public.wattwise_power_limits VALUES ('bert/squad', 64, 200);
INSERT INTO public.wattwise_power_limits VALUES ('team.a/resnet50@v2', 256, 275.5);
INSERT INTO public.wattwise_power_limits VALUES ('team.a/resnet50@v2', 128, 275.5);

INSERT INTO public.wattwise_runs VALUES (2, 'bert/squad', 32, 'explore', 'reached', 200, NULL, 4, 600000, 2049, 556125, 1700000111, 1700000333);
INSERT INTO public.wattwise_runs VALUES (3, 'bert/squad', 16, 'explore', 'reached', 200, 1112250, 3, 450000, 1536.75, 417093.75, 1700000370, 1700000555);
INSERT INTO public.wattwise_runs VALUES (4, 'bert/squad', 64, 'explore', 'failed', 200, 834187.5, 6, 900000, 3073.5, 834187.5, 1700000592, 1700000888);
INSERT INTO public.wattwise_runs VALUES (5, 'bert/squad', 16, 'exploit', 'reached', 200, 834187.5, 3, 450000, 1536.75, 417093.75, 1700000925, 1700001110);
INSERT INTO public.wattwise_runs VALUES (6, 'bert/squad', 16, 'exploit', 'open', 200, 834187.5, 1, 150000, 512.25, 139031.25, 1700001147, 1700001221);
INSERT INTO public.wattwise_runs VALUES (7, 'team.a/resnet50@v2', 256, 'explore', 'reached', 275.5, NULL, 4, 600000, 2049, 1901160, 1700001295, 1700001517);
INSERT INTO public.wattwise_runs VALUES (8, 'team.a/resnet50@v2', 128, 'explore', 'reached', 275.5, 4752900, 3, 450000, 1536.75, 1425870, 1700001554, 1700001739);
INSERT INTO public.wattwise_runs VALUES (9, 'team.a/resnet50@v2', 128, 'exploit', 'reached', 275.5, 3564675, 7, 1050000, 3585.75, 3327030, 1700001776, 1700002109);
INSERT INTO public.wattwise_runs VALUES (10, 'team.a/resnet50@v2', 256, 'exploit', 'reached', 275.5, 3564675, 3, 450000, 1536.75, 1425870, 1700002146, 1700002331);
INSERT INTO public.wattwise_runs VALUES (11, 'team.a/resnet50@v2', 256, 'exploit', 'open', 275.5, 3564675, 1, 150000, 512.25, 475290, 1700002368, 1700002442);

INSERT INTO public.wattwise_schema_version VALUES (1);

SELECT pg_catalog.setval('public.wattwise_runs_id_seq', 11, true);

ALTER TABLE ONLY public.wattwise_jobs
    ADD CONSTRAINT wattwise_jobs_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.wattwise_power_limits
    ADD CONSTRAINT wattwise_power_limits_pkey PRIMARY KEY (job_name, batch_size);

ALTER TABLE ONLY public.wattwise_runs
    ADD CONSTRAINT wattwise_runs_pkey PRIMARY KEY (id);

CREATE INDEX ix_wattwise_runs_job_name_id ON public.wattwise_runs USING btree (job_name, id);

ALTER TABLE ONLY public.wattwise_power_limits
    ADD CONSTRAINT wattwise_power_limits_job_name_fkey FOREIGN KEY (job_name) REFERENCES public.wattwise_jobs(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.wattwise_runs
    ADD CONSTRAINT wattwise_runs_job_name_fkey FOREIGN KEY (job_name) REFERENCES public.wattwise_jobs(name) ON DELETE CASCADE;

